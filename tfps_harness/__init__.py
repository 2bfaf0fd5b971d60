"""Helpers for the tests and benchmarks of a source checkout; not part of the installed
package (setup.py packages tf_ps_ops and sfb only)."""
