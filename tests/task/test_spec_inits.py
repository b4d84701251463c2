"""The initialisers robust-kbench's tasks use, drawn from size expressions: torch's defaults for linear and
convolution weights (kaiming_uniform with a=sqrt(5)) and xavier_normal."""
import math

import torch

from kevolve.task.inits import draw


def _gen(seed: int = 0) -> torch.Generator:
    g = torch.Generator()
    g.manual_seed(seed)
    return g


def test_kaiming_uniform_matches_torch_default_bound_from_a_size_expression():
    w = draw("kaiming_uniform(C * K * K)", (4000, 50), "float32", {"C": 3, "K": 5}, _gen(), "cpu")
    bound = 1 / math.sqrt(75)
    assert float(w.abs().max()) <= bound
    assert float(w.abs().max()) > 0.99 * bound            # uniform over the whole interval
    ref = torch.empty(4000, 75)
    torch.nn.init.kaiming_uniform_(ref, a=math.sqrt(5))    # torch's own bound for fan_in = 75
    assert abs(float(ref.abs().max()) - bound) < 1e-3 * bound


def test_xavier_normal_has_torch_std():
    w = draw("xavier_normal(N, M)", (2000, 300), "float32", {"N": 300, "M": 2000}, _gen(1), "cpu")
    assert abs(float(w.std()) - math.sqrt(2 / 2300)) < 0.01 * math.sqrt(2 / 2300)
    assert abs(float(w.mean())) < 1e-3


def test_round_puts_any_initialiser_on_a_power_of_two_grid():
    """round(2**-k, INIT): INIT's draw (the same generator stream) rounded to multiples of 2**-k."""
    sizes = {"N": 300}
    w = draw("round(2**-10, kaiming_uniform(N))", (2000, 300), "float32", sizes, _gen(2), "cpu")
    plain = draw("kaiming_uniform(N)", (2000, 300), "float32", sizes, _gen(2), "cpu")
    assert w.dtype == torch.float32
    assert torch.equal(w * 2**10, torch.round(w * 2**10))                 # on the grid
    assert float((w - plain).abs().max()) <= 2**-11                       # the nearest grid point
    assert len(torch.unique(w)) > 100                                     # still spread over the interval


def test_round_is_validated_when_a_task_loads():
    from kevolve.task.inits import valid_init
    assert valid_init("round(2**-4, normal)") and valid_init("round(2**3, normal(0, 2))")
    assert not valid_init("round(0.1, normal)") and not valid_init("round(2**-4, gaussian)")


def test_a_configuration_may_list_its_own_init_sets_in_place_of_the_shape_sets():
    """layernorm_fwd's rows of 4M elements take offset_mild instead of offset (float32 torch's error there);
    an init set the task does not define is refused, naming the configuration."""
    import pytest
    import yaml
    from kevolve.task.spec import TaskError
    from kevolve.task.load import _parse, load_task
    t = load_task("layernorm_fwd")
    by_shape: dict = {}
    for c in t.configs("bench"):
        by_shape.setdefault(c.sizes, []).append(c.init)
    assert by_shape[(("B", 8), ("N", 4194304))] == ["random", "identity", "tiny", "offset_mild"]
    assert by_shape[(("B", 8), ("N", 65536))] == ["random", "identity", "tiny", "offset"]
    raw = yaml.safe_load((t.dir / "task.yaml").read_text())
    raw["shapes"]["small"]["configs"][0]["inits"] = ["random", "offset_wild"]
    with pytest.raises(TaskError, match="configuration .*'B': 1.* uses init 'offset_wild', which the task does not"):
        _parse(raw, t.dir)
