"""The planned nests' printer (exporter/printer/planned.py): a run-time split cut at whole
chunks of its lanes."""

from __future__ import annotations

from exactc.exporter import dims
from exactc.exporter.kernels.layouts import Layout
from exactc.exporter.kernels.lower import lower
from exactc.exporter.kernels.plans import NestPlan, Plan, validate_plan
from exactc.exporter.kernels.splits import Split
from exactc.exporter.printer.kernels import print_kernel

# ---- a run-time split in parts over lanes of 2, cut at whole chunks


T8 = dims.length(8)  # a run-time length of at most 8: the extents that follow it


def test_a_split_in_parts_over_lanes_of_two_cuts_at_whole_chunks_of_two():
    kernel = lower("linear", "f32", {"x": (T8, 4), "w": (5, 4)}, {})
    plan = Plan((("linear", NestPlan(Layout(lanes=(("m", 2),)), Split(0, ((0, 1), (1, 2)), of=2))),))
    validate_plan(kernel, plan)
    lines = print_kernel(kernel, "lin", plan).source.splitlines()
    start = lines.index("int lin_split(const float *restrict x, const float *restrict w, float *restrict y, "
                        "int64_t T) {")
    assert lines[start + 1:lines.index("    int status = 0;", start)] == [
        "    static const int64_t parts[2][2] = {{0, 1}, {1, 2}};  /* in parts of 2 */",
        "    int64_t pieces[2][2];",
        "    for (int p = 0; p < 2; p++) {",
        "        pieces[p][0] = parts[p][0] == 2 ? T : T * parts[p][0] / 2 / 2 * 2;  /* whole chunks of 2 */",
        "        pieces[p][1] = parts[p][1] == 2 ? T : T * parts[p][1] / 2 / 2 * 2;  /* whole chunks of 2 */",
        "    }",
    ]
