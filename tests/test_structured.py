"""The structured host (exporter/printer/structured.py): a fold's one-layer segments, each
with its own comment and indentation."""

from __future__ import annotations

from test_graph import apart_program


# ---- a fold's one-layer segments as the structured host prints them


def _fold_segment_lines(text: str) -> list[str]:
    """The lines of model.c's fold that open a segment and the first line inside each."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if "/* The layers:" in line)
    picked = []
    for i, line in enumerate(lines[start:], start):
        if line.startswith("    {") or line.startswith("    for (int l"):
            picked += [line, lines[i + 1]]
        if line == "}":
            break
    return picked


def test_a_one_layer_model_prints_its_only_layer_as_layer_0_not_as_a_layer_apart():
    from exactc.exporter import models
    from exactc.exporter.printer.host import print_program

    program = models.build("gpt", "forward", {"layers": 1, "tokens": 4, "vocab": 16, "positions": 4, "dim": 8,
                                              "heads": 2, "mlp": 8})
    text = print_program(program, "f32").files["model.c"]
    assert _fold_segment_lines(text) == ["    { /* layer 0 */", "        float *x_out_next = x_out_a;"]
    assert "runs apart" not in text


def test_a_layer_apart_in_the_middle_of_a_fold_and_the_layers_around_it_print_each_with_its_comment_and_indent():
    from exactc.exporter.printer.host import print_program

    program, _ = apart_program(3, (1,))
    text = print_program(program, "f32").files["model.c"]
    # three one-layer segments: block, other apart, block again; each body one level in
    assert _fold_segment_lines(text) == [
        "    { /* layer 0 */", "        float *add_out_next = add_out_a;",
        "    { /* layer 1 runs apart: other */", "        float *add_out_next = add_out_b;",
        "    { /* layer 2 */", "        float *add_out_next = add_out_a;",
    ]
    assert '        EXACTC_TRACE_CARRY("block", 2, 0, add_out_l, 48);\n    }\n' in text


# ---- each function's scratch: a table above it, a birth before the first write


def test_each_function_opens_with_its_table_and_each_buffer_is_born_before_its_first_launch():
    import re

    from exactc.exporter import models
    from exactc.exporter.printer.host import print_program

    program = models.build("gpt", "decode", {"layers": 2, "tokens": 4, "vocab": 16, "positions": 4, "dim": 8,
                                             "heads": 2, "mlp": 8})
    text = print_program(program, "f32").files["model.c"]
    assert "ARENA(" not in text and "RELEASE(" not in text  # the straight-line host's, not this one's
    tables = dict(re.findall(r"#define (\w+_SCRATCH)\(arena\) \\\n((?:    .*\n)+?)\n", text))
    assert sorted(tables) == ["BLOCK_CACHED_SCRATCH", "DECODE_SCRATCH", "MLP_SCRATCH"]
    for macro, table in tables.items():
        declared = re.findall(r"float \*(\w+) = SCRATCH\(float, \(arena\) \+ (\d+)\)", table)
        body = text[text.index(f"    {macro}(arena);\n"):]
        body = body[: body.index("\n}\n")]
        born = re.findall(r"^    BORN\((\w+), [^;]+\);$", body, re.M)
        assert sorted(born) == sorted(name for name, _ in declared), macro  # each once, each declared
        for name in born:  # born before any line names it, and after every launch before that line
            birth = body.index(f"BORN({name},")
            assert not re.search(rf"\b{name}\b", body[:birth]), (macro, name)
            after = body[birth:].splitlines()[1:]
            first = next(i for i, line in enumerate(after) if re.search(rf"\b{name}\b", line))
            launches = [line for line in after[:first] if line.endswith(");") and "BORN(" not in line]
            assert launches == [], (macro, name, launches)


def test_a_reverse_fold_loops_from_its_last_layer_down_alternating_its_carry_by_step():
    from exactc.exporter import models
    from exactc.exporter.printer.host import print_program

    program = models.build("gpt", "loss_grad", {"layers": 3, "tokens": 4, "vocab": 16, "positions": 5, "dim": 8,
                                                "heads": 2, "mlp": 8})
    text = print_program(program, "f32").files["model.c"]
    start = text.index("/* The layers: block_bar from l = 2 down to 0")
    loop = text[start:text.index("\n    }\n", start)]
    assert "    for (int l = 2; l >= 0; l--) {" in loop
    assert "((2 - l) % 2 == 0 ? " in loop  # layer 2 is step 0: the carry's first buffer
    assert "    for (int l = 0; l < 3; l++) {" in text  # the forward's layers, 0 up
