"""pytest plugin for `make test-upstream` with the overlay: loads dwconv_overlay into the
test process before any test module imports torch's kernels, and refuses to run if it
is not active (a run that silently tested stock torch would prove nothing)."""

import pytest


def pytest_configure(config):
    try:
        import dwconv_overlay
    except ImportError as err:
        raise pytest.UsageError(f"dwconv_overlay does not load: {err}") from None
    if not dwconv_overlay.enabled():
        raise pytest.UsageError("dwconv_overlay loaded but is disabled")
    config._dwconv_patchset = dwconv_overlay.PATCHSET_HASH


def pytest_report_header(config):
    return f"dwconv overlay: patch set {config._dwconv_patchset[:12]}, enabled"
