"""The kernel IR, its lowering, and the layouts, splits and plans over it: a malformed node,
attribute, split or plan field taken instead of refused, a reversed index or a launch
checked on one side only, a fresh name that clashes."""

from exactc.mutants.model import Mutant

IR = "exactc/exporter/kernels/ir.py"
LAYOUTS = "exactc/exporter/kernels/layouts.py"
PLANS = "exactc/exporter/kernels/plans.py"
SPLITS = "exactc/exporter/kernels/splits.py"

MUTANTS: list[Mutant] = [
    Mutant(
        "ir-reversed-index-span-on-the-high-side",
        "the checker's interval of an index adds every term's span to its upper end: a reversed "
        "index (x[2 - i]) reaches below 0 and is accepted",
        IR,
        "        if coef < 0:\n            lo = lo + span\n        else:\n            hi = hi + span\n",
        "        hi = hi + span\n",
        ("ir",),
        family="ir",
    ),
    Mutant(
        "ir-launch-extent-unchecked",
        "the checker compares a launch's arguments with its nest's but not its extent: a launch "
        "over part of the outermost axis (or past it) is accepted",
        IR,
        "if item.args != expected.args or item.extent != expected.extent:",
        "if item.args != expected.args:",
        ("ir",),
        family="ir",
    ),
    Mutant(
        "split-without-pieces-not-refused",
        "a split's count of pieces is bounded above only: a split with no pieces gets past the "
        "count and is refused for a gap instead, naming the wrong rule",
        SPLITS,
        "if not 1 <= len(split.pieces) <= MAX_PIECES:",
        "if len(split.pieces) > MAX_PIECES:",
        ("splits",),
        family="splits",
    ),
    Mutant(
        "fresh-name-takes-lo-or-hi",
        "a name the printed layout introduces may be lo or hi, the nest function's range "
        "parameters, which it then shadows",
        LAYOUTS,
        'while candidate in taken or candidate in ("lo", "hi"):',
        "while candidate in taken:",
        ("layouts:names",),
        family="layouts",
    ),
    Mutant(
        "plan-split-without-pieces-is-a-key-error",
        "a plan file's split is checked for unknown fields but not for its required ones: a split "
        "without pieces ends in a KeyError, not a PlanError naming the field",
        PLANS,
        'not set(_SPLIT_FIELDS) <= set(raw) <= {*_SPLIT_FIELDS, "of"}',
        'not set(raw) <= {*_SPLIT_FIELDS, "of"}',
        ("plans",),
        family="plans",
    ),
    Mutant(
        "real-attribute-past-f64-unrefused",
        "a real attribute given as an integer past f64's range ends in an OverflowError, not a refusal",
        "exactc/exporter/kernels/lower.py",
        "    except OverflowError:  # an int past f64's range",
        "    except ZeroDivisionError:  # an int past f64's range",
        ("lower",),
        family="lowering",
    ),
    Mutant(
        "list-attribute-of-names-read-as-ints",
        "a list attribute of names is read as ints: a bare ValueError of int() that names "
        "neither the attribute nor the rule",
        "exactc/exporter/kernels/lower.py",
        "            if any(isinstance(v, bool) or not (dims.is_symbolic(v) or isinstance(v, (int, np.integer)))"
        " for v in value):",
        "            if False:",
        ("lower",),
        family="lowering",
    ),
]
