"""Shared by the Python package's tests: paths from ctest's environment (python/CMakeLists.txt),
with fallbacks for running pytest by hand from the repository root."""
import os
import sys

import pytest

SOURCE_DIR = os.environ.get("ATTNLAB_SOURCE_DIR") or os.path.abspath(
    os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD_DIR = os.environ.get("ATTNLAB_BUILD_DIR") or os.path.join(SOURCE_DIR, "build")
ATTNLAB_BIN = os.environ.get("ATTNLAB_BIN") or os.path.join(BUILD_DIR, "attnlab")

# The built package first (PYTHONPATH is set by ctest; this covers a hand-run pytest), and the
# repository's tests/ for the PyTorch oracles' model writers.
sys.path.insert(0, os.path.join(BUILD_DIR, "python"))
sys.path.insert(1, os.path.join(SOURCE_DIR, "tests"))


@pytest.fixture
def attnlab_bin():
    return ATTNLAB_BIN


@pytest.fixture
def source_dir():
    return SOURCE_DIR
