"""The host: which launches run, where their buffers live, when buffers are released."""

from exactc.mutants.model import Mutant

HOST = "exactc/exporter/printer/host.py"
REQUIRES = (HOST,)

MUTANTS = [
    Mutant(
        "host-drops-residual-adds",
        "the structured host skips every launch of an add (the residual connections): "
        "live launches dropped",
        HOST,
        "                self.lines.extend(INDENT + line for line in launch_lines(node, use, names))",
        "                if node.primitive != \"add\":\n"
        "                    self.lines.extend(INDENT + line for line in launch_lines(node, use, names))",
        ("programs",),
        family="host",
        requires=REQUIRES,
    ),
    Mutant(
        "arena-overlaps-a-buffer-still-read",
        "the arena places a launch's output over a buffer whose last read is that same "
        "launch: two live buffers share bytes",
        HOST,
        "rivals = sorted((b for b in placed if not (b.last < buf.first or buf.last < b.first))",
        "rivals = sorted((b for b in placed if not (b.last <= buf.first or buf.last < b.first))",
        ("programs",),
        family="host",
        requires=REQUIRES,
    ),
    Mutant(
        "buffer-released-one-launch-early",
        "a buffer is released after the launch before its last read",
        HOST,
        "    return last_use\n",
        "    return last_use - 1\n",
        ("programs",),
        family="host",
        requires=REQUIRES,
    ),
    Mutant(
        "plan-entries-never-checked",
        "a plan entry that applies to no nest is ignored: a misspelt kernel prefix exports "
        "a plain program without a word",
        HOST,
        "        unused = [name for name in self.plan.entry_names() if name not in self.plan_used]\n",
        "        unused: list[str] = []\n",
        ("programs:plans",),
        family="host",
        requires=REQUIRES,
    ),
]
