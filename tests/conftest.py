"""Session set-up shared by every test module."""

import os

# rich lays tables and panels out to the terminal's width, and under pytest that width depends on how the tests run
# (in one process or in xdist workers: 80 columns there, which cut the solve panel's plan line). Tests read those
# outputs, so they run at one generous width; a test of the width itself clears COLUMNS for its subprocess.
os.environ.setdefault("COLUMNS", "200")
