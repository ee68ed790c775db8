"""Exported programs under ASan and UBSan (verify/sanitizers.py): the quick member of the
sample that `make verify` runs in full (every architecture, f32 and bf16, plain and
planned, gcc and clang, 1 and 3 threads, and memcheck)."""

from __future__ import annotations

from exactc.verify import sanitizers


def test_a_sanitized_program_conforms_without_a_report():
    built, runs = sanitizers.sanitize([sanitizers.Sample("gpt", "f32")], ["gcc"], [1], progress=lambda line: None)
    assert built == 1 and len(runs) == 1
    assert runs[0].clean, runs[0].describe()
    assert runs[0].cc == "gcc" and runs[0].threads == 1


def test_a_report_is_found_and_cut_to_its_first_lines():
    stderr = "ok       logits.npy\n" + "\n".join(
        ["=================================================================",
         "==7==ERROR: AddressSanitizer: heap-buffer-overflow on address 0x602000000018",
         "READ of size 1 at 0x602000000018 thread T0"] + [f"    #{i} 0x0 in frame{i}" for i in range(20)])
    report = sanitizers.sanitizer_report(stderr)
    assert report[0] == "==7==ERROR: AddressSanitizer: heap-buffer-overflow on address 0x602000000018"
    assert len(report) == sanitizers.REPORT_LINES
    assert sanitizers.sanitizer_report("model.c:12:5: runtime error: signed integer overflow")[0].endswith(
        "signed integer overflow")
    assert sanitizers.sanitizer_report("ok       logits.npy\n") == []


def test_memcheck_reports_its_first_error_after_the_banner():
    stderr = "\n".join([
        "==9== Memcheck, a memory error detector", "==9== Copyright (C) 2002-2022, and GNU GPL'd, by Julian Seward",
        "==9== Using Valgrind-3.19.0 and LibVEX", "==9== Command: ./model w.safetensors in out", "==9== ",
        "==9== Invalid read of size 1", "==9==    at 0x10B659: exactc_input_take (exactc_host.c:184)",
        "==9== ", "==9== ERROR SUMMARY: 1 errors from 1 contexts (suppressed: 0 from 0)"])
    report = sanitizers.memcheck_report(stderr)
    assert report[:2] == ["==9== Invalid read of size 1", "==9==    at 0x10B659: exactc_input_take (exactc_host.c:184)"]
    assert sanitizers.ERROR_SUMMARY.search(stderr).group(1) == "1"
