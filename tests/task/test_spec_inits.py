"""The initialisers robust-kbench's tasks use, drawn from size expressions: torch's defaults for linear and
convolution weights (kaiming_uniform with a=sqrt(5)) and xavier_normal."""
import math

import torch

from kevolve.task.spec import _draw


def _gen(seed: int = 0) -> torch.Generator:
    g = torch.Generator()
    g.manual_seed(seed)
    return g


def test_kaiming_uniform_matches_torch_default_bound_from_a_size_expression():
    w = _draw("kaiming_uniform(C * K * K)", (4000, 50), "float32", {"C": 3, "K": 5}, _gen(), "cpu")
    bound = 1 / math.sqrt(75)
    assert float(w.abs().max()) <= bound
    assert float(w.abs().max()) > 0.99 * bound            # uniform over the whole interval
    ref = torch.empty(4000, 75)
    torch.nn.init.kaiming_uniform_(ref, a=math.sqrt(5))    # torch's own bound for fan_in = 75
    assert abs(float(ref.abs().max()) - bound) < 1e-3 * bound


def test_xavier_normal_has_torch_std():
    w = _draw("xavier_normal(N, M)", (2000, 300), "float32", {"N": 300, "M": 2000}, _gen(1), "cpu")
    assert abs(float(w.std()) - math.sqrt(2 / 2300)) < 0.01 * math.sqrt(2 / 2300)
    assert abs(float(w.mean())) < 1e-3
