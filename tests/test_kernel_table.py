"""The kernels' names in a program (exporter/printer/kernel_table.py): labels joined into
one name, a name the host or the program holds taken by the next number."""

from __future__ import annotations

from exactc.exporter import graph
from exactc.exporter.kernels.lower import lower

# ---- the kernels' names in the models' programs


def test_graph_names_name_the_kernels():
    """A kernel is named for its primitive, and for the values it makes where the program
    has more than one kernel of that primitive (printer/kernel_table.py): the names the
    models give their nodes are the files' names."""
    from exactc.exporter import export
    gpt = {"vocab": 16, "positions": 8, "dim": 8, "heads": 2, "layers": 1, "mlp": 8, "tokens": 4}
    llama = {"vocab": 16, "dim": 8, "heads": 2, "kv_heads": 1, "layers": 1, "mlp": 8, "tokens": 4}
    want = {
        ("gpt", "forward"): "add embedding gelu_tanh layernorm linear_attn_out_fc_mlp_out linear_logits linear_qkv "
                            "matmul_mixed matmul_scores scale slice_k slice_pos slice_q slice_v softmax "
                            "transpose_mixed_t transpose_q_k_v_t",
        ("bert", "embed"): "add embedding_segment embedding_words gelu_erf l2norm layernorm linear matmul_mixed "
                           "matmul_scores mean_pool reshape scale slice softmax transpose_mixed_t transpose_q_k_v_t",
        ("llama", "next_token"): "add argmax embedding linear_k_v linear_logits linear_q_attn_out_gate matmul_mixed "
                                 "matmul_scores mul rmsnorm_attn_mlp_norm rmsnorm_norm rope_k_rot rope_q_rot scale "
                                 "silu slice softmax transpose_k_v_t transpose_mixed_t transpose_q_t",
        ("gpt", "decode"): "add cache_write embedding gelu_tanh layernorm linear_attn_out_fc_mlp_out linear_logits "
                           "linear_qkv matmul_mixed matmul_scores scale slice_k slice_pos slice_q slice_v softmax "
                           "transpose_mixed_t transpose_q_k_v_t",
    }
    for (model, entry), names in want.items():
        p = export.ExportSpec(model, entry, "f32", 0, llama if model == "llama" else gpt).prepare()
        got = [f[len("kernels/"):-len(".c")] for f in sorted(p.printed.files) if f.startswith("kernels/")]
        assert got == names.split(), (model, entry)


# ---- the kernels' names in a program (printer/kernel_table.py)


def test_the_labels_of_a_kernels_values_join_into_one_name():
    from exactc.exporter.printer.kernel_table import joined_labels

    assert joined_labels(["qkv"]) == "qkv"
    assert joined_labels(["q_t", "k_t", "v_t"]) == "q_k_v_t"  # a common suffix written once
    assert joined_labels(["q_a_t", "k_a_t"]) == "q_k_a_t"  # cut at its first underscore
    assert joined_labels(["a_x_q", "a_x_k"]) == "a_x_q_k"  # a common prefix, cut at its last underscore
    assert joined_labels(["ab_cd", "ab_ce"]) == "ab_cd_ce"  # ... not inside a stem
    assert joined_labels(["xa", "ya"]) == "xa_ya"  # a common end without an underscore is no suffix
    assert joined_labels(["a_b", "a_b_b"]) == "a_b_a_b_b"  # a stem would be empty: the names whole


def test_a_kernel_named_like_a_name_of_the_host_takes_the_next_number():
    from exactc.exporter import models
    from exactc.exporter.printer.kernel_table import host_names, kernel_key, kernel_names, launched_ops, op_shapes

    program = models.build("gpt", "forward", {"layers": 1, "tokens": 4})
    ops = launched_ops(program)
    kernels = {}
    for op in ops:
        kernels.setdefault(kernel_key(op), lower(op.primitive, "f32", op_shapes(op), op.attrs))
    names = kernel_names(ops, kernels, host_names(program))
    assert sorted(names.values()) == [
        "add", "embedding", "gelu_tanh", "layernorm", "linear_attn_out", "linear_fc", "linear_logits",
        "linear_mlp_out", "linear_qkv", "matmul_mixed", "matmul_scores", "scale", "slice_k", "slice_pos",
        "slice_q", "slice_v", "softmax", "transpose_mixed_t", "transpose_q_k_v_t"]
    clashing = kernel_names(ops, kernels, host_names(program) | {"softmax", "scale_2"})
    assert sorted(set(clashing.values()) - set(names.values())) == ["softmax_2"]
    assert "scale" in clashing.values()  # scale_2 taken, scale itself is free
    split = kernel_names(ops, kernels, host_names(program) | {"add_split"})  # a split driver's name counts too
    assert "add_2" in split.values() and "add" not in split.values()


def test_a_kernel_named_like_a_function_of_the_program_takes_the_next_number():
    from exactc.exporter.printer.kernel_table import host_names, kernel_key, kernel_names, launched_ops, op_shapes

    def silu(x):  # a module function named as the kernel it launches
        return graph.silu(x, name="act")

    def entry(params, x):
        return {"y": graph.call(silu, x)}

    program = graph.trace("m", "e", entry, [], [graph.InputSpec("x", (2, 4), "x")])
    ops = launched_ops(program)
    kernels = {kernel_key(op): lower(op.primitive, "f32", op_shapes(op), op.attrs) for op in ops}
    assert "silu" in host_names(program)
    assert list(kernel_names(ops, kernels, host_names(program)).values()) == ["silu_2"]
