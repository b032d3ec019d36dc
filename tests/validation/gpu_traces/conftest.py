import pytest

from validation.formats.pipespec import read_pipespec_dir

from . import FIX


@pytest.fixture(scope="module")
def runs():
    """Every PipeSpec run of the fixture folder."""
    return read_pipespec_dir(FIX)
