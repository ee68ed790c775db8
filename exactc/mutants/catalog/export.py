"""The export, the graph and the JSON reader: an export written or swapped without its
safeguards, signals held wrong, a fold's carry or apart layer taken unchecked, the JSON
size bound off by one."""

from exactc.mutants.model import Mutant

EXPORT = "exactc/exporter/export.py"
GRAPH = "exactc/exporter/graph.py"
JSONFILE = "exactc/exporter/jsonfile.py"

MUTANTS: list[Mutant] = [
    Mutant(
        "replace-file-leaves-its-temporary",
        "a write that fails keeps its temporary beside the file: every failed or interrupted "
        "write leaves a `.name.partial-*` behind",
        "exactc/exporter/files.py",
        "            Path(temporary).unlink(missing_ok=True)\n",
        "            pass\n",
        ("export",),
        family="export",
    ),
    Mutant(
        "failed-swap-drops-the-earlier-export",
        "when the new directory cannot be renamed into place, the earlier export moved aside is "
        "not put back: --force loses the directory it was to replace",
        EXPORT,
        '            os.replace(old / "dir", target)\n            raise\n',
        "            raise\n",
        ("export",),
        family="export",
    ),
    Mutant(
        "held-signal-raised-once-per-arrival",
        "signals held through a block are raised again once per arrival, not once per kind: a "
        "second Ctrl-C during a rename lands after the handler that the first one ran",
        "exactc/exporter/files.py",
        "for number in dict.fromkeys(caught):",
        "for number in caught:",
        ("export",),
        family="export",
    ),
    Mutant(
        "json-bound-refuses-max-bytes",
        "the JSON size bound off by one: a file of exactly MAX_BYTES, which the bound allows, is refused as too long",
        JSONFILE,
        "if len(data) > MAX_BYTES:",
        "if len(data) >= MAX_BYTES:",
        ("jsonfile",),
        family="jsonfile",
    ),
    Mutant(
        "fold-carry-rearranged-silently",
        "a fold body that gives its carry dict back with the keys in another order is taken: the "
        "carry goes round by position, so the next layer reads one value under the other's key",
        GRAPH,
        "            if _arrangement(got_skeleton) != _arrangement(carry_skel):\n",
        "            if False:\n",
        ("graph",),
        family="graph",
    ),
    Mutant(
        "fold-apart-index-may-equal-count",
        "a fold's apart iteration bounded by count inclusive: an apart body at index count, an "
        "iteration that never runs, is taken silently",
        GRAPH,
        "if not 0 <= index < count:",
        "if not 0 <= index <= count:",
        ("graph",),
        family="graph",
    ),
    Mutant(
        "checkpoint-loss-grad-batch-dropped",
        "a loss_grad exported from a checkpoint takes the request's batch out and never puts it "
        "back: the program runs one sequence whatever --set batch says",
        EXPORT,
        "    overrides = {**checkpoint.overrides(request), **batch}\n",
        "    overrides = checkpoint.overrides(request)\n",
        ("export",),
        family="export",
    ),
]
