"""Shared fixtures: the `loupe` executable (ctest passes LOUPE_EXECUTABLE; else build/bin/loupe)."""

import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture
def loupe_executable():
    path = os.environ.get("LOUPE_EXECUTABLE", os.path.join(ROOT, "build", "bin", "loupe"))
    if not os.path.exists(path):
        pytest.skip("the loupe executable is not built (%s)" % path)
    return path
