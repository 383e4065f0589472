"""The exact formulation of one candidate (tp, dp, micro-batch, pp) as a MILP (PuLP/CBC) or CP-SAT model.

model.py writes each constraint family once, as one function whose docstring is its inequality, over a small
backend interface (linear.py); milp.py and cpsat.py implement that interface for PuLP and OR-Tools.
"""
