"""Which of the cluster's node types a profile table covers, checked once before any search.

A node type is covered when, for some tp the search may use on it (a candidate tp <= its GPUs per node) and some
micro-batch size, the profile has rows for its GPU and every layer kind of the model (embedding, head and the
model's kinds: candidates.profile_covers). The search (candidates.node_uses) silently drops uncovered node types;
this module says so instead:
  * none of the usable node types covered: ProfileError (exit 2), one line naming the profile, the GPUs it has and
    the GPUs the cluster needs, before any solving;
  * some covered: the search goes on over those, and `coverage_note` is the line the CLI prints on stderr and puts
    in the answer (whose status then holds over the covered node types only).
Node types with no nodes available are not the profile's business and are left alone.
"""

from __future__ import annotations

from optsearch.errors import ProfileError
from optsearch.problem import Problem
from optsearch.spec.model import EMBEDDING_KIND, HEAD_KIND


def _layer_kinds(problem: Problem) -> list[str]:
    return [EMBEDDING_KIND, HEAD_KIND, *(k.name for k in problem.model.kinds)]


def _profile_gpus(problem: Problem) -> list[str] | None:
    """The GPUs a table holds rows for (None for a profile that is not a table, e.g. analytic)."""
    profile = problem.profile
    while not hasattr(profile, "gpus") and hasattr(profile, "base"):  # a calibrated (scaled) table
        profile = profile.base
    gpus = getattr(profile, "gpus", None)
    return sorted(gpus()) if callable(gpus) else None


def uncovered_node_types(problem: Problem, options=None) -> dict[str, str]:
    """Node types (with nodes available) that the profile covers at no (tp, micro-batch size), each with why."""
    from optsearch.candidates import SpaceOptions, micro_batch_candidates, profile_covers, tp_candidates

    options = options if options is not None else SpaceOptions()
    tps, mbss = tp_candidates(problem), micro_batch_candidates(problem, options)
    kinds = _layer_kinds(problem)
    table_gpus = _profile_gpus(problem)
    out: dict[str, str] = {}
    for node in problem.cluster.node_types:
        if node.num_nodes_available == 0:
            continue
        usable = [t for t in tps if t <= node.gpus_per_node]
        if any(profile_covers(problem, node.gpu, t, b) for t in usable for b in mbss):
            continue
        if table_gpus is not None and node.gpu not in table_gpus:
            out[node.name] = f"no rows for its GPU {node.gpu}"
        else:
            out[node.name] = (f"no tp (of {usable}) and micro-batch size (of {mbss}) with rows for "
                              f"every layer kind ({', '.join(kinds)}) on its GPU {node.gpu}")
    return out


def check_profile_coverage(problem: Problem, options=None) -> dict[str, str]:
    """The node types left out (see uncovered_node_types); ProfileError when that is every usable one."""
    left_out = uncovered_node_types(problem, options)
    usable = [n for n in problem.cluster.node_types if n.num_nodes_available > 0]
    if usable and len(left_out) == len(usable):
        has = _profile_gpus(problem)
        needs = sorted({n.gpu for n in usable})
        has_text = f"has GPUs {has}" if has is not None else "has no usable rows"
        raise ProfileError(f"profile {problem.profile.name} covers none of cluster {problem.cluster.name}'s node types "
                           f"for model {problem.model.name}: it {has_text}, the cluster needs {needs} (with rows for "
                           f"{', '.join(_layer_kinds(problem))} at one tp and micro-batch size); import or measure a "
                           f"table for those GPUs (import-profile --gpu-map), or use --profile analytic")
    return left_out


def coverage_note(left_out: dict[str, str], profile_name: str) -> str:
    """One line naming each node type left out and why ('' when none)."""
    if not left_out:
        return ""
    return (f"left out of the search, not covered by profile {profile_name}: "
            + "; ".join(f"{name} ({why})" for name, why in left_out.items()))


def scoped_message(status: str, message: str, left_out: dict[str, str], profile_name: str) -> str:
    """A result's message as every command's JSON gives it (solve, compare, whatif, pareto): with node types left out,
    an optimum holds over the covered ones only ('optimal over the node types the profile covers') and the coverage
    note follows; otherwise the message unchanged."""
    if not left_out:
        return message
    scope = "optimal over the node types the profile covers" if status == "optimal" else ""
    return "; ".join(m for m in (scope, coverage_note(left_out, profile_name), message) if m)
