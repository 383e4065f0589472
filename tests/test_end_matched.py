"""Round 17 (timerows): quick plans and positional sequences whose two ends run on one type
(formulation/heuristic.end_matched, heuristic.END_MATCHED). The tied embedding's all-reduce between the first and the
last stage runs at the slower NIC of the pair; a fill that ends on a slow-NIC type pays it on every iteration.
Incumbents only: each plan is priced by the cost model (Memo.runnable); the solver's brute-force tests (test_solver,
test_audit_dist_bounds, test_positional_last_end's instances among them) run with the switch on."""

from __future__ import annotations

from optsearch.candidates import node_uses
from optsearch.formulation import heuristic
from optsearch.formulation.heuristic import _blocks_fit, _type_sequences, end_matched
from optsearch.formulation.model import Candidate
from optsearch.solver import Memo, _best_meeting
from optsearch.spec.budget import Budget


def _catalog(model: str, cluster: str = "mixed-pool-8k"):
    from optsearch.cli.options import space_from_target
    from optsearch.edits import edited_problem
    from optsearch.targets import engine_problem

    problem = engine_problem("megatron", edited_problem(model, cluster, []))
    return problem, space_from_target("megatron", problem)


def test_megatron_76b_time_optimum_is_an_end_matched_quick_plan(monkeypatch):
    """Megatron 76B, mixed-pool-8k, time: tp 2, dp 16, cp 4, pp 30. The fastest-first fill (15 p5 stages, then 15
    p4d, the last with the head alone) prices at 138,850 s, E = 0.168 s on the A100's NIC; with one p5 stage moved to
    the end, 127,229.87 s (E = 0.021 s), the best plan known for the row (on 3e0ad5b it came only from that
    candidate's model, at 14 s of CPU). Without the switch the best quick plan is the 138,850 s one."""
    problem, options = _catalog("megatron-76b")
    uses = tuple(node_uses(problem, 2, 16, 1, 4, options))
    cand = Candidate(tp=2, dp=16, micro_batch_size=1, pp=30, uses=uses, cp=4)
    names = [u.name for u in uses]
    best = {}
    for on in (False, True):
        monkeypatch.setattr(heuristic, "END_MATCHED", on)
        memo = Memo(problem, options)
        best[on] = _best_meeting(Budget(objective="time"), memo.quick_plans(memo.skeleton(cand)))
    assert best[True][0] <= 127229.87488477702 * (1 + 1e-9)
    assert best[False][0] > 1.05 * best[True][0]
    stages = best[True][1].stages
    assert stages[0].node_type == stages[-1].node_type == "p5.48xlarge"
    assert {s.node_type for s in best[False][1].stages} <= set(names)


def test_end_matched_moves_one_block_of_the_faster_end_type():
    """On the catalog's candidates whose fills end on two types: the moved sequence has the same types (as a
    multiset), both ends on the type whose own pair has the least E, blocks that fit, and is None where the ends
    already share a type; among the quick plans' sequences exactly when a fill's ends differ."""
    problem, options = _catalog("megatron-76b")
    checked = 0
    for tp, dp, b, cp, pp in ((2, 16, 1, 4, 30), (2, 16, 1, 4, 20), (4, 16, 1, 2, 24)):
        uses = tuple(node_uses(problem, tp, dp, b, cp, options))
        sk = Memo(problem, options).skeleton(Candidate(tp=tp, dp=dp, micro_batch_size=b, pp=pp, uses=uses, cp=cp))
        seqs = _type_sequences(sk)
        for seq in seqs:
            moved = end_matched(sk, seq)
            if seq[0] == seq[-1]:
                assert moved is None
                continue
            e = sk.c.emb_inter_s
            g = min((seq[0], seq[-1]), key=lambda h: (e[h][h], h))
            if moved is None:
                continue
            checked += 1
            assert sorted(moved) == sorted(seq) and moved[0] == moved[-1] == g
            assert _blocks_fit(sk, moved) and moved in seqs
            assert e[g][g] < e[seq[0]][seq[-1]]
    assert checked > 0
