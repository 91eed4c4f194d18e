"""The hostile scenario's parts: raw wire bits, the attacks and the harness that runs them.

:mod:`benchmarks.scenarios.hostile` is the scenario; these modules run in the
attacker and neighbour processes it starts.
"""
