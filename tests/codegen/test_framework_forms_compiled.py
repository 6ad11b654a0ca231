"""The forms frameworks dump around a compute op (tests/support/framework_forms.py),
each fused into one kernel, give the reference's results: integer outputs
exactly (powers-of-two scales keep every int8 value exact), floats within
graphc.tolerances."""
import pytest

from support import check_compiled
from support.framework_forms import FORMS


@pytest.mark.parametrize("name", sorted(FORMS))
def test_compiled_equals_reference(name):
    g, inputs = FORMS[name][0]()
    assert len(g.get_partitions()) == 1
    check_compiled(g, inputs, what=name)
