"""Printers: the C of an exported program.

ctext.py (pieces every printer uses), nests.py (a nest as a C function) and planned.py
(a nest under a plan), kernels.py (a kernel's file, choosing between the two),
kernel_table.py (a program's kernels, named), structured.py and straight.py (the two
hosts' networks) and host.py (the program's files: model.c, kernels.h, kernels/).
"""
