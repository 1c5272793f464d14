"""Model builders, parameter counts and the local-training strategies."""

import subprocess
import sys

import pytest
import torch

from airplan_qo.errors import UnknownNameError, ValidationError
from airplan_qo.runtime.flat import ParamLayout, auto_strategy, client_gradients
from airplan_qo.model_size import BUILTIN_MODELS, parameter_count
from airplan_qo.model_size import MODELS, build_model
from airplan_qo.runtime.models import BUILDERS

SHAPES = [(1, 8, 8), (3, 32, 32), (1, 28, 28), (3, 64, 64), (2, 5, 7)]


def test_builtin_models_are_registered():
    assert set(BUILTIN_MODELS) <= set(MODELS.names())
    assert set(BUILDERS) == set(BUILTIN_MODELS)


@pytest.mark.parametrize("name", ["logistic", "mlp", "mlp2", "cnn4"])
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("n_classes", [2, 10, 100])
def test_parameter_count_matches_the_built_model(name, shape, n_classes):
    model = MODELS.get(name)(shape, n_classes)
    assert parameter_count(name, shape, n_classes) == sum(p.numel() for p in model.parameters())


def test_parameter_counts_are_the_textbook_ones():
    assert parameter_count("resnet18", (3, 32, 32), 10) == 11_173_962
    assert parameter_count("mlp", (60,), 10) == 60 * 64 + 64 + 64 * 10 + 10
    assert parameter_count("logistic", (1, 8, 8), 10) == 64 * 10 + 10
    # cnn1d on (1, 40): 40 -> 20 -> 10 -> 5 steps, then 32 * 5 features
    assert parameter_count("cnn1d", (1, 40), 10) == \
        (5 * 16 + 16) + (16 * 3 * 32 + 32) + (32 * 3 * 32 + 32) + (32 * 5 * 10 + 10)


def test_flat_features_work_for_mlp_not_cnn():
    with pytest.raises(ValidationError, match="cnn4 needs image inputs"):
        parameter_count("cnn4", (60,), 10)
    with pytest.raises(ValidationError, match="at least 4x4"):
        parameter_count("cnn4", (1, 3, 3), 10)
    with pytest.raises(ValidationError, match="cnn1d needs signal inputs"):
        parameter_count("cnn1d", (1, 8, 8), 10)


def test_unknown_model_suggests():
    with pytest.raises(UnknownNameError, match="did you mean 'cnn4'"):
        parameter_count("cnn44", (1, 8, 8), 10)


def test_model_registry_does_not_import_torch_and_counting_without_it_says_how():
    code = ("import sys; from airplan_qo.model_size import MODELS, parameter_count; "
            "import airplan_qo.runtime; from airplan_qo.plans.workload import Workload; "
            "Workload(model='cnn1d'); print('torch' in sys.modules); "
            "sys.modules['torch'] = None\n"
            "try:\n    parameter_count('cnn4', (3, 32, 32), 10)\n"
            "except Exception as exc:\n    print(type(exc).__name__, exc)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    first, second = out.stdout.strip().split("\n")
    assert first == "False"
    assert second.startswith("ValidationError") and "pip install torch" in second


def test_models_are_buffer_free_and_run():
    for name, shape in [("cnn4", (1, 8, 8)), ("cnn4", (3, 32, 32)), ("mlp", (1, 8, 8))]:
        model = build_model(name, shape, 10)
        assert not list(model.buffers())
        assert model(torch.zeros(2, *shape)).shape == (2, 10)


def test_auto_strategy_rule():
    assert auto_strategy(build_model("mlp", (1, 8, 8), 10), (1, 8, 8)) == "batched"
    assert auto_strategy(build_model("cnn4", (1, 8, 8), 10), (1, 8, 8)) == "batched"
    assert auto_strategy(build_model("cnn4", (3, 32, 32), 10), (3, 32, 32)) == "loop"


@pytest.mark.parametrize("name,shape", [("mlp", (1, 8, 8)), ("cnn4", (1, 8, 8)),
                                        ("logistic", (12,)), ("mlp2", (2, 4, 4)),
                                        ("cnn1d", (1, 40)), ("cnn1d", (2, 12))])
def test_strategies_compute_the_same_gradients(name, shape):
    torch.manual_seed(0)
    model = build_model(name, shape, 5)
    layout = ParamLayout(model)
    params = layout.flatten(model).repeat(4, 1) + 0.05 * torch.randn(4, layout.d)
    x = torch.randn(4, 6, *shape)
    y = torch.randint(0, 5, (4, 6))
    ref, ref_loss = client_gradients(model, params, x, y, "loop")
    for strategy in ("batched", "vmap"):
        grads, losses = client_gradients(model, params, x, y, strategy)
        torch.testing.assert_close(grads, ref, rtol=1e-4, atol=1e-6)
        torch.testing.assert_close(losses, ref_loss, rtol=1e-5, atol=1e-6)
    # and the loop equals plain autograd on one client
    one = build_model(name, shape, 5)
    torch.nn.utils.vector_to_parameters(params[2], one.parameters())
    loss = torch.nn.functional.cross_entropy(one(x[2]), y[2])
    loss.backward()
    direct = torch.cat([p.grad.reshape(-1) for p in one.parameters()])
    torch.testing.assert_close(ref[2], direct, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("shape", [(3, 8, 8), (1, 8, 8)])
def test_zero_channel_padding_of_the_first_convolution_changes_nothing(monkeypatch, shape):
    """What a GPU does to cnn4's first grouped convolution (input channels padded with zeros to
    GPU_MIN_GROUP_CHANNELS), forced on the CPU: the same logits, gradients and losses."""
    from airplan_qo.runtime import flat

    torch.manual_seed(0)
    model = build_model("cnn4", shape, 5)
    layout = ParamLayout(model)
    params = layout.flatten(model).repeat(4, 1) + 0.05 * torch.randn(4, layout.d)
    x = torch.randn(4, 6, *shape)
    y = torch.randint(0, 5, (4, 6))
    assert flat.channel_padding(x) == 0                     # nothing on the CPU
    ref, ref_loss = client_gradients(model, params, x, y, "batched")
    ref_logits = flat.stacked_forward(model, layout.views(params), x)
    monkeypatch.setattr(flat, "channel_padding",
                        lambda h: flat.GPU_MIN_GROUP_CHANNELS - h.shape[2])
    grads, losses = client_gradients(model, params, x, y, "batched")
    logits = flat.stacked_forward(model, layout.views(params), x)
    torch.testing.assert_close(logits, ref_logits, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(grads, ref, rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(losses, ref_loss, rtol=1e-5, atol=1e-6)


def test_batched_strategy_refuses_resnet():
    with pytest.raises(ValidationError, match="batched"):
        client_gradients(build_model("resnet18", (3, 8, 8), 10), torch.zeros(1, 1),
                         torch.zeros(1, 1, 3, 8, 8), torch.zeros(1, 1, dtype=torch.long),
                         "batched")


@pytest.mark.parametrize("name,shape", [("logistic", (60,)), ("mlp", (1, 8, 8)),
                                        ("mlp2", (40,)), ("cnn4", (1, 8, 8))])
def test_client_correct_counts_what_argmax_counts_ties_and_nan_included(name, shape):
    from airplan_qo.runtime.flat import client_correct, client_logits
    torch.manual_seed(0)
    model = MODELS.get(name)(shape, 10)
    layout = ParamLayout(model)
    params = torch.randn(7, layout.d) * 0.3
    # client 3 scores every class alike (argmax then picks class 0), client 5 is NaN
    params[3] = 0.0
    params[5, 0] = float("nan")
    x = torch.randn(300, *shape)
    y = torch.randint(0, 10, (300,))
    y[:40] = 0
    expected = (client_logits(model, layout, params, x, "batched").argmax(dim=2)
                == y.unsqueeze(0)).sum(dim=1)
    got = client_correct(model, layout, params, x, y, "batched")
    assert got.tolist() == expected.tolist()
    assert got[3] == int((y == 0).sum())
