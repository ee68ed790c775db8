"""Printers: kernels (kernels.py: one C function per nest of the kernel IR)."""
