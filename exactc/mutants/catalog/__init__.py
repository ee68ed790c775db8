"""The mutant catalog: one module per family, and the checks the runner can run.

A check's name is what the report prints as the catcher. Kernel checks are narrowed to
one primitive with a -k expression, so a mutant of layernorm runs layernorm's cases only.
"""

from __future__ import annotations

from exactc.mutants.model import Check, Mutant
from exactc.mutants.catalog import (
    building,
    campaigns,
    checkpoints,
    comparison,
    constants,
    dots,
    export,
    extents,
    floors,
    fused,
    generation,
    hardening,
    hygiene,
    harness,
    host,
    kernel_ir,
    keys,
    lanes,
    layouts,
    lengths,
    library,
    loop_bounds,
    probes,
    quant,
    readers,
    rounding,
    scop,
    semantics,
    serve,
    shapes,
    slicing,
    speed,
    startup,
    training,
    tuning,
)

PRIMITIVE_CASES = "tests/test_primitives.py"


def kernels(primitive: str) -> str:
    """The name of the check that runs one primitive's C-against-reference cases."""
    return f"kernels:{primitive}"


_FIXED_CHECKS = [
    Check("compilers", ("tests/test_compilers.py",)),
    # qlinear_i's block kernels (one row, 8 rows, 8 rows from a block panel) in every build.
    Check("compilers:block-kernels", ("tests/test_compilers.py",), "block_kernels_give"),
    # The floors of docs/design.md and no circle of imports, read from the source.
    Check("imports", ("tests/test_imports.py",)),
    # ruff's lint and format check and mypy, as pyproject.toml configures them.
    Check("lint", ("tests/test_lint.py",)),
    # Compile-only builds for CPUs other than this one (sapphirerapids, Zen 4 and 5, AArch64):
    # the header preprocessed as the tuner does, two exported programs built warning-free.
    Check("compilers:foreign", ("tests/test_compilers.py",), "foreign"),
    # Both k-quant forms over each k-quant at -O2 and -O3, -march=native or not, gcc and clang.
    Check("compilers:k-quants", ("tests/test_compilers.py",), "k_quant"),
    # The fused kernels built by gcc and clang at -O0 to -O3, with and without -march=native.
    Check("compilers:fused", ("tests/test_compilers.py",), "fused_reference"),
    Check("conversions", ("tests/test_conversions.py",)),
    Check("libm-twin", ("tests/test_libm.py",)),
    Check("npy", ("tests/test_npy.py",)),
    # The runtime's host (exactc_host.c): weights, inputs, outputs, exactc_main's refusals.
    Check("host-runtime", ("tests/test_host_runtime.py",)),
    # The library (exactc_api.c, model.h) and its binding (exactc/library.py): two handles
    # on two threads, the GIL released while C runs, the generation loop's tokens heard,
    # hostile use refused (tests/test_library.py).
    Check("library:threads", ("tests/test_library.py",), "two_handles"),
    Check("library:gil", ("tests/test_library.py",), "gil"),
    Check("library:generate", ("tests/test_library.py",), "generation"),
    Check("library:hostile", ("tests/test_library.py",), "hostile"),
    Check("embed:encoder", ("tests/test_embed.py",), "sentence_embedder"),
    # `exactc serve` asked by the openai package (tests/test_serve.py): its refusals' status
    # and body, the 429 past its queue, a seeded completion's tokens, its pool's bound, Nagle off.
    Check("serve:errors", ("tests/test_serve.py",), "bad_requests"),
    Check("serve:queue", ("tests/test_serve.py",), "past_the_queue"),
    Check("serve:seed", ("tests/test_serve.py",), "seeded_completion"),
    Check("serve:pool", ("tests/test_serve.py",), "32_clients"),
    Check("serve:nagle", ("tests/test_serve.py",), "nagle"),
    Check("reference", ("tests/test_reference.py",)),
    # The reference's fused multiply-add against exact rational arithmetic and the C
    # library's fma, on drawn and adversarial triples (tests/test_fma.py).
    Check("fma", ("tests/test_fma.py",)),
    # The runtime's software fma (exactc_fma.h) against the hardware's and the C library's.
    Check("fma:soft", ("tests/test_fma.py",), "software"),
    # The fused lanes compiled for a target with FMA: packed vfmadd, no call.
    Check("layouts:fused-asm", ("tests/test_layouts.py",), "fused_lanes_are_vectorized"),
    # The fused linear's automatic layout for AVX2 compiled by gcc: no stack slot in its loop.
    Check("layouts:fused-registers", ("tests/test_layouts.py",), "keeps_its_sums_in_registers"),
    Check("autoplan:fused-narrow", ("tests/test_autoplan.py",), "fused_matrix_nest"),
    # The fused realization's kernels (linear, matmul, qlinear_w at every site), C against
    # the reference's fma_A, and the near-tie that one rounding decides.
    Check("kernels:fused", (PRIMITIVE_CASES,), "test_fused"),
    # Programs of the three architectures exported with --contract fma, conformance.
    Check("programs:fused", ("tests/test_programs.py",), "test_fused_program_matches_reference and -f32]"),
    # The same built for the baseline x86-64 (no FMA instruction), run on the C library's
    # software fma (glibc's FMA hidden by GLIBC_TUNABLES).
    Check("programs:fused-portable", ("tests/test_programs.py",), "without_fma"),
    # The backward rules (tests/test_backward.py): central differences at f64 on fixed and
    # drawn cases, and the spec's reduction orders pinned bit for bit at f32.
    Check("backward", ("tests/test_backward.py",)),
    # Training against torch at f64 (tests/test_training.py): every gradient of tiny Hugging
    # Face GPT-2 and Llama checkpoints against torch.autograd; AdamW steps against
    # torch.optim.AdamW with the 2-D weights alone decayed.
    Check("training:autograd", ("tests/test_training.py",), "autograd"),
    Check("training:adamw", ("tests/test_training.py",), "adamw or decay"),
    Check("training:clipping", ("tests/test_training.py",), "clipping"),
    # A weight's gradient over every (b, t) in one f32 accumulator, bit for bit.
    Check("training:orders", ("tests/test_training.py",), "one_accumulator"),
    Check("training:dead-code", ("tests/test_training.py",), "does_not_reach"),
    # The loss_grad graph (tests/test_backprop.py): its walk against the reverse walk, bit
    # for bit, and its layers' backward a reverse fold reading the residuals kept.
    Check("training:graph", ("tests/test_backprop.py",)),
    Check("programs:loss-grad-lengths", ("tests/test_programs.py", "tests/test_library.py"),
          "more_positions_than_tokens or many_outputs"),
    # The training loop (tests/test_train.py): a run resumed at step 3 writes step 6's
    # checkpoint and loss log as the same bytes as the uninterrupted run.
    Check("train:resume", ("tests/test_train.py",), "resumed"),
    # The token stream: llm.c's file format refused in one line, the batches' layout and wrap.
    Check("train:tokens", ("tests/test_train.py",), "llm_c_s_format or each_batch"),
    # Twenty f32 steps of `exactc train` on a tiny Hugging Face GPT-2 against the same run in
    # PyTorch (llm.c's batches and schedule, torch.optim.AdamW): the losses within 1e-4.
    Check("train:pytorch", ("tests/test_train.py",), "pytorch"),
    # The exported program's loop (`model train`, runtime/exactc_train.c): 20 steps of tiny
    # Hugging Face GPT-2 and Llama checkpoints, the reference's checkpoint and loss log bytes
    # at 1 and 2 threads, gcc and clang, and resumed at step 10.
    Check("train:c", ("tests/test_train.py",), "c_loop"),
    # `model train`'s refusals of a token file, and exactc train's of --threads.
    Check("train:c-refusals", ("tests/test_train.py",), "c_program_refuses"),
    Check("kernel-print", ("tests/test_kernels_print.py",)),
    # Quantized operands: C against the reference, the pinned hand-computed values, the
    # exporter's quantizer and nibble order, stacked q4 layers (tests/test_quant.py).
    Check("quant", ("tests/test_quant.py",)),
    # Programs with quantized linear weights: conformance, the weights file's tensors, what
    # is quantized, the refusals (tests/test_quant_programs.py).
    Check("quant:programs", ("tests/test_quant_programs.py",)),
    # The integer form's values read as block panels laid out at load: q8 and q4 decode
    # programs conformant on 1 and 2 threads.
    Check("quant:block-panels", ("tests/test_quant_programs.py",), "block_panels"),
    # ggml's k-quants: the reference against the gguf package on drawn super-blocks, the
    # scale packing and values by hand (tests/test_quant.py); GGUF files of k-quant tensors
    # read, refused and run (tests/test_gguf_file.py).
    Check("quant:k-quants", ("tests/test_quant.py",), "k_quant"),
    Check("gguf:k-quants", ("tests/test_gguf_file.py",), "k_quant or q6_k"),
    # make bench's oracle: llama.cpp's own quantizer's Q4_K_M, Q5_K_M and Q6_K files read
    # as the gguf package dequantizes them, their f64 export against transformers
    # (bench/test_bench_gguf.py; skipped, so never the only catcher, without llama-cpp-python).
    Check("bench:gguf", ("bench/test_bench_gguf.py",)),
    # The automatic plan's layouts of the quantized nests (the measured ones, split on the
    # output columns), and q8 and q4 llama decode and forward programs under it.
    Check("autoplan:quantized", ("tests/test_autoplan.py",), "quantize"),
    # The fused realization's nests tuned apart from the default's (their own signature).
    Check("autoplan:fused", ("tests/test_autoplan.py",), "fused"),
    # Every architecture's entries exported in f32: built by gcc, clang and without
    # OpenMP, the checking build (NaN arena, reached peak), the straight-line oracle.
    # Every layout and split of the reductions-heavy primitives, C against the reference,
    # red zones and the coverage check of the pieces on.
    Check("layouts:property", ("tests/test_layouts.py",),
          "test_every_layout_and_split_gives_the_reference_bits and (linear or layernorm or softmax or add or matmul)"),
    # Integer sums of quantized linears regrouped in every lanes x parts, remainders too.
    Check("layouts:integer-sums", ("tests/test_layouts.py",), "integer_sums"),
    # qlinear_i's whole blocks as calls of exactc_dot.h under layouts, for this CPU and not.
    Check("layouts:block-kernels", ("tests/test_layouts.py",), "block_kernels"),
    # exactc_dot.h's block sums, each path the CPU runs, against numpy on drawn and extreme
    # blocks; the VNNI paths built for targets that have them.
    Check("dot", ("tests/test_dot.py",)),
    # The property on k-quant weights: qlinear_w and qlinear_i under drawn layouts and splits.
    Check("layouts:k-quants", ("tests/test_layouts.py",), "k_quant"),
    # The same at a run-time length: shapes that follow T, run at a drawn T, outputs sized at T.
    Check("layouts:run-time", ("tests/test_layouts.py",), "run_time_length"),
    Check("programs", ("tests/test_programs.py",), "test_program_matches_reference and -f32]"),
    # The run-time length: refused outside [1, T_max]; at T the bytes of the program for T.
    Check("programs:lengths", ("tests/test_programs.py",), "length"),
    # Plans passed to whole programs: applied by kernel, and refused when they match nothing.
    Check("programs:plans", ("tests/test_programs.py",), "plan"),
    # The graph builder's own programs of tests/printed/ (no parameters, no inputs, "%" in
    # parameter names, an entry named like a host global), built and checked.
    Check("programs:builder", ("tests/test_programs.py",), "builders_printed"),
    # The exported Makefile's default build (-march=native) against the portable one, both
    # conformant; the laned linear's accumulators in registers (gcc and clang).
    Check("fast-build", ("tests/test_fast_build.py",)),
    # Linear weights laid out as panels at load (printer/prepack.py): which kernels and
    # parameters, and the automatic plan's splits between chunks of lanes.
    Check("prepack", ("tests/test_prepack.py", "tests/test_autoplan.py"), "packed or panels or chunks"),
    # A program that differs: the report's index, values and layer (a fold slice misread).
    Check("programs:report", ("tests/test_programs.py",), "skips_a_layer"),
    # The one build: each compiler really builds; the export cache keys on what matters.
    Check("programs:build", ("tests/test_programs.py",), "rebuilds or cached_by or concurrent"),
    # The cache's entries (tests/test_cache.py): a byte flipped or a program broken in a real
    # entry is caught and rebuilt; the size bound removes the least recently used first,
    # never one a running command holds, nor does exactc cache --clear.
    Check("cache:check", ("tests/test_cache.py",), "rebuilt"),
    Check("cache:bound", ("tests/test_cache.py",), "least_recently_used or running_command"),
    # The command line: one-line refusals (exit 2) and failed builds (exit 1).
    Check("cli", ("tests/test_programs.py",), "cli"),
    # exactc run --backend c: the export it builds takes --plan auto unless told otherwise.
    Check("commands:run-plan", ("tests/test_commands.py",), "automatic_plan"),
    # exactc embed asks for its program by the spec of its options (tests/test_embed.py).
    Check("embed:program", ("tests/test_embed.py",), "asked_for_by_its_spec"),
    # --contract reaches the program of run, embed and generate, and their reference.
    Check("commands:contract", ("tests/test_commands.py", "tests/test_embed.py", "tests/test_generate.py"),
          "contract or hands_the_cache"),
    # The one comparison: Python and C (conformance/compare) agree; check.sh applies it.
    Check("compare", ("tests/test_compare.py",)),
    # Instruction counts (verify/probes/): linear growth where cost must be linear, and
    # no count risen against this toolchain's baseline.
    Check("probes:growth", ("tests/test_probes.py",), "growth"),
    # loss_grad: linear in the layers and the tokens (attention apart), its count a stated
    # multiple of the forward's.
    Check("probes:grad", ("tests/test_probes.py",), "loss_grad"),
    Check("probes:quant-growth", ("tests/test_probes.py",), "quantized_linear"),
    Check("probes:baseline", ("tests/test_probes.py",), "regression_against_the_baseline or missing_baseline"),
    # The exporter against one function's node count (N = 64 ... 512): no pass rescans the nodes.
    Check("probes:nodes", ("tests/test_probes.py",), "node_count"),
    # A decode step: attention linear in the position, the rest constant.
    Check("probes:decode", ("tests/test_probes.py",), "decode_step"),
    # The exported generation loop: every step but attention the same cost, whatever the position.
    Check("probes:generate", ("tests/test_probes.py",), "generate_loop"),
    # Checkpoint loaders: read-back bits, llama2.c against the Hugging Face route, refusals
    # (not the MiniLM embed runs); the transformers oracle on drawn GPT-2, Llama and BERT.
    Check("checkpoints", ("tests/test_checkpoints.py",), "not embed and not exported"),
    Check("oracle", ("tests/test_oracle.py",), "gpt2 or llama or bert"),
    # The harness: a piece make install provides, missing under make test, fails the run.
    Check("installed", ("tests/test_installed.py",)),
    # make coverage's instrumented builds: this run's folder in the key; counted builds never instrumented.
    Check("gcov-builds", ("tests/test_gcov_builds.py",)),
    # make mutants-report's page: its own sections rewritten, every later one kept.
    Check("mutants-report", ("tests/test_mutants.py",), "report_keeps"),
    Check("mutants-cpu", ("tests/test_mutants.py",), "this_cpu_cannot_show"),
    # Checks and batches that die: a pytest killed by a signal, one past its time, a dask
    # worker killed under a mutant's batch; crashed or timed out, named, never a pass or a catch.
    Check("mutants-deaths", ("tests/test_mutants.py",), "killed_by_a_signal or past_its_time or killed_under_it"),
    # A mutant's row names the test that failed, not the log lines printed above pytest's summary.
    Check("mutants-detail", ("tests/test_mutants.py",), "log_lines"),
    # The mutmut campaign's cheap parts: its staged config, verdicts, batches and their tests.
    Check("mutmut-campaign", ("tests/test_mutmut_campaign.py",)),
    # docs/semantics.md's table of rounded constants against the code (tools/spec_constants.py).
    Check("spec-constants", ("tests/test_spec_constants.py",)),
    # docs/cli.md against what `exactc --help` and every command's --help print (tools/cli_docs.py).
    Check("cli-docs", ("tests/test_cli_docs.py",)),
    # What a fresh interpreter imports for each command's --help and for an embedding from
    # a cached program (python -X importtime), and bf16's ml_dtypes imported on first use.
    Check("cli:imports", ("tests/test_cli.py",), "imports"),
    # --contract's choices are the realizations, the default (off) first.
    Check("cli:contract", ("tests/test_cli.py",), "contract_choices"),
    # The kernel campaign's fused tasks: fused families, counted in the fma family.
    Check("campaign:fused", ("tests/test_campaign_engine.py",), "fused"),
    Check("types:bf16", ("tests/test_types.py",), "bf16"),
    # The C text the exporter prints against tests/printed/ (tools/printed_text.py): what a
    # user reads and no bit shows, a comment's shape or a layout's note.
    Check("printed-text", ("tests/test_printed_text.py",)),
    # ChaCha20 keys: against pycryptodome and rand_chacha's / rand_core's published values
    # (C and twin alike), and the C runtime against its twin over drawn keys.
    Check("keys:oracle", ("tests/test_keys.py",), "known or oracle"),
    Check("keys:twin", ("tests/test_keys.py",), "twin"),
    # Generation (tests/test_generation.py): the cache against recompute and a decode step
    # against forward at every position; each step's child key; the stop token.
    Check("generate:cache", ("tests/test_generation.py",), "recompute or last_row"),
    Check("generate:keys", ("tests/test_generation.py",), "child_key"),
    Check("generate:stop", ("tests/test_generation.py",), "stop_token"),
    Check("generate:command", ("tests/test_generation.py",), "generate_command"),
    # The program exactc generate builds (tests/test_generate.py): the automatic plan by
    # default, one cached program per plan, --weights in both backends, the timing line.
    Check("generate:fast", ("tests/test_generate.py",), "plan or weights or timing"),
    # llama2.c's tokenizer.bin (tests/test_tokenizer_bin.py): run.c's ids worked by hand,
    # decode's rules, the file's refusals, exactc generate prompted with text.
    Check("generate:tokenizer", ("tests/test_tokenizer_bin.py",)),
    # The exported decode program's own loop (`model generate`, runtime/exactc_generate.c):
    # its tokens, probabilities and uniforms against the reference's loop, its refusals.
    Check("generate:program", ("tests/test_generate_program.py",)),
    # make verify's side: the exported prefill and decode programs (both hosts) against the
    # reference, one model and type (about a minute).
    Check("generate:programs", ("tests/test_generate_program.py",), "prefill_and_decode and llama-f32"),
    # Sampling: the spec's worked examples on both implementations, and C against the
    # reference over drawn logits and options.
    Check("sampling:spec", ("tests/test_sampling.py",), "spec"),
    Check("sampling:reference", ("tests/test_sampling.py",), "c_equals_reference"),
    # Both backends against transformers' logits warpers (temperature, top-k, top-p in
    # generate's order): the kept set and the probabilities, drawn and hand-made logits.
    Check("sampling:oracle", ("tests/test_sampling.py",), "warpers"),
    # The runtime's safetensors reader against the safetensors library, and the bounds of
    # both readers' file reads; the program tests' own safetensors refusals.
    Check("safetensors", ("tests/test_safetensors.py",)),
    Check("programs:safetensors", ("tests/test_programs.py",), "safetensors"),
    # Bad input, one line: the table of malformed checkpoints, configs and plans through the
    # Python API and through `exactc export` (exit 2, nothing written); Hypothesis on the
    # Python readers (their own error or a correct result, never another exception).
    Check("bad-inputs:api", ("tests/test_bad_inputs.py",), "api"),
    Check("bad-inputs:cli", ("tests/test_bad_inputs.py",), "exit_2"),
    # The command line's other doors (options, output paths, the environment, --force): one
    # line, the exit code, nothing written or removed.
    Check("bad-inputs:doors", ("tests/test_bad_inputs.py",), "door"),
    Check("fuzz:readers", ("tests/test_fuzz_readers.py",)),
    # The libFuzzer harnesses of fuzz/, built with replay.c's main and libFuzzer's, over the
    # seed corpus under ASan and UBSan.
    Check("fuzz:replay", ("tests/test_fuzz_harnesses.py",)),
    # Exported programs built with ASan and UBSan (gpt, f32, gcc, one thread): check.sh passes
    # and no sanitizer reports (verify/sanitizers.py; make verify runs the whole sample).
    Check("sanitizers", ("tests/test_sanitizers.py",)),
    # The kernel campaign of make verify: families sharing a kernel, tasks, their counts.
    Check("campaign", ("tests/test_campaign_engine.py",)),
    # A real dask scheduler and two workers on localhost run a small campaign: it equals a local run.
    Check("dask-cluster", ("tests/test_dask_cluster.py",)),
    # exporter/dims.py's refusals and walks over nested values.
    Check("dims", ("tests/test_dims.py",)),
    # `exactc plan --tune`: the candidates timed whole, the fastest kept, the table of this
    # build only, a tuned program's bits and its own export cache key.
    Check("tune", ("tests/test_tune.py",)),
    # The narrow and wide layouts of the matrix nests (EXACTC_NARROW_LANES,
    # EXACTC_WIDE_LANES): chosen, printed under #if and #elif, refused when they change
    # more than the outer lanes, and programs built with each layout forced giving the
    # reference's bytes.
    Check("autoplan:variants", ("tests/test_autoplan.py",), "narrow or wide or every_layout"),
    # The elementwise transcendentals' chunks of 256 (16 where 256 do not fill), and
    # their run-time split cut between whole chunks.
    # The backward's column-wise products in lanes of output elements, their sums inside.
    Check("autoplan:backward", ("tests/test_autoplan.py",), "backward_product or gelu_s_backward"),
    Check("autoplan:elements", ("tests/test_autoplan.py",), "elementwise"),
    # The refusals and rare paths branch coverage found unreached (docs/coverage.md), each
    # with the tests of its module: the kernel IR, its lowering, layouts' fresh names,
    # splits and plan files; the export, the graph and the JSON reader; the checkpoint
    # readers; the runtime's .npy and .safetensors readers and writer at the doors no file
    # opens; the models' configs, the catalogue's shape rules, the host's and ctext's C text.
    Check("ir", ("tests/test_ir.py",)),
    Check("lower", ("tests/test_lower.py",)),
    Check("layouts:names", ("tests/test_layouts.py",), "fresh_name"),
    Check("splits", ("tests/test_splits.py",)),
    Check("plans", ("tests/test_plans.py",)),
    Check("export", ("tests/test_export.py",)),
    Check("graph", ("tests/test_graph.py",)),
    Check("jsonfile", ("tests/test_jsonfile.py",)),
    Check("gguf", ("tests/test_gguf_file.py",)),
    Check("hf", ("tests/test_hf.py",)),
    Check("llama2c", ("tests/test_llama2c.py",)),
    # A checkpoint of drawn fields (every one a reader takes) against the program built
    # from the fields themselves, bit for bit at f32 and f64: a field dropped or misread.
    Check("gguf:drawn", ("tests/test_gguf_file.py",), "drawn_fields"),
    Check("llama2c:drawn", ("tests/test_llama2c.py",), "drawn_fields"),
    Check("hf:drawn", ("tests/test_hf.py",), "drawn_fields"),
    Check("readers:doors", ("tests/test_npy.py", "tests/test_safetensors.py"),
          "null_argument or null_or_twice or not_one or that_is_one or stream_that_fails or closed_pipe "
          "or past_what_memory or cannot_be_opened or another_dtype_or_shape or own_dtype_and_shape "
          "or without_tensors or dtype_names_and_sizes"),
    Check("models", ("tests/test_models.py",)),
    Check("primitives:catalogue", (PRIMITIVE_CASES,), "not c_equals_reference and not mixed_batches"),
    Check("host-printer", ("tests/test_host.py",)),
    # The structured host's text: a fold's segments, each function's scratch table and births.
    Check("structured", ("tests/test_structured.py",)),
    Check("ctext", ("tests/test_ctext.py",)),
    # SCoP mode (tests/test_scop.py): every nest of every forward at every type run by its
    # directory's driver on the reference's operands, bit for bit; exactc's verdict per nest
    # against Polly's SCoP detection (clang-19 with libpolly-19-dev).
    Check("scop:bits", ("tests/test_scop.py",), "keeps_the_reference_bits"),
    Check("scop:polly", ("tests/test_scop.py",), "agrees_with_polly"),
]

FAMILIES = [slicing, loop_bounds, layouts, lengths, host, rounding, semantics, constants, probes, checkpoints, harness,
            keys, generation, hardening, comparison, building, quant, speed, lanes, campaigns, extents,
            tuning, kernel_ir, export, readers, shapes, floors, hygiene, fused, training, startup,
            library, scop, serve, dots]

CATALOG: list[Mutant] = [m for family in FAMILIES for m in family.MUTANTS]

CHECKS: dict[str, Check] = {c.name: c for c in _FIXED_CHECKS}
for _mutant in CATALOG:
    for _name in _mutant.checks:
        if _name.startswith("kernels:") and _name not in CHECKS:
            _primitive = _name.split(":", 1)[1]
            CHECKS[_name] = Check(_name, (PRIMITIVE_CASES,), f"test_c_equals_reference and [{_primitive}-")

_unknown = sorted({n for m in CATALOG for n in m.checks} - set(CHECKS))
assert not _unknown, f"mutants name checks that do not exist: {_unknown}"
_names = [m.name for m in CATALOG]
assert len(_names) == len(set(_names)), "mutant names must be unique"
