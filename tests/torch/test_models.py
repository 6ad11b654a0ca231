"""Real models nobody here wrote (transformers' architectures from small configs,
random weights, no download) compiled by graphc.torch against eager torch:
outputs within graphc.tolerances.MODEL, and graphc running most of their ATen nodes."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from graphc.tolerances import MODEL  # noqa: E402

from support.torch_backend import assert_tensors_close, check_against_eager  # noqa: E402


def _bert(**kw):
    config = transformers.BertConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4,
                                     intermediate_size=128, vocab_size=100, max_position_embeddings=32, **kw)
    return transformers.BertModel(config)


def _gpt2(**kw):
    config = transformers.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=100, n_positions=32,
                                     bos_token_id=0, eos_token_id=0, **kw)
    return transformers.GPT2Model(config)


def _ids(seed=0):
    return torch.randint(0, 100, (2, 8), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("make,coverage", [(_bert, 0.9), (_gpt2, 0.9)], ids=["bert", "gpt2"])
def test_transformer_inference_f32(make, coverage):
    torch.manual_seed(0)
    model = make().eval()
    lowered = check_against_eager(model, _ids(), table=MODEL)
    assert lowered.coverage >= coverage and "aten::embedding" not in lowered.fallback, lowered.fallback


def test_bert_inference_under_bf16_autocast():
    torch.manual_seed(0)
    model = _bert().eval()

    def run(ids):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return model(ids).last_hidden_state
    lowered = check_against_eager(run, _ids(3), table=MODEL)
    assert lowered.coverage >= 0.9 and "aten::embedding" not in lowered.fallback, lowered.fallback


def _mask():
    mask = torch.ones(2, 8, dtype=torch.long)
    mask[1, 5:] = 0
    return mask


@pytest.mark.parametrize("make", [_bert, _gpt2], ids=["bert", "gpt2"])
def test_transformer_with_attention_mask(make):
    """A padding mask: its int64 index arithmetic (arange, comparisons, bitwise_and, int
    adds and views) runs in graphc too; graphc's Select takes the mask's where, a bool
    expand folded into it.  (What stays in torch: index and gather.)"""
    torch.manual_seed(0)
    model = make().eval()
    lowered = check_against_eager(lambda i, m: model(input_ids=i, attention_mask=m), _ids(1), _mask(), table=MODEL)
    assert lowered.coverage >= 0.9 and not {"aten::where.self", "aten::embedding"} & set(lowered.fallback), \
        lowered.fallback
    assert not {"aten::arange.start_step", "aten::bitwise_and.Tensor", "aten::unsqueeze"} & set(lowered.fallback), \
        lowered.fallback


class _ResBlock(torch.nn.Module):
    """A ResNet stem and basic block: conv, batch norm, ReLU, max pool, residual, global average pool."""

    def __init__(self):
        super().__init__()
        self.stem = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 7, 2, 3, bias=False), torch.nn.BatchNorm2d(8),
                                        torch.nn.ReLU(), torch.nn.MaxPool2d(3, 2, 1))
        self.c1, self.b1 = torch.nn.Conv2d(8, 8, 3, 1, 1, bias=False), torch.nn.BatchNorm2d(8)
        self.c2, self.b2 = torch.nn.Conv2d(8, 8, 3, 1, 1, bias=False), torch.nn.BatchNorm2d(8)
        self.fc = torch.nn.Linear(8, 10)

    def forward(self, x):
        x = self.stem(x)
        y = self.b2(self.c2(torch.relu(self.b1(self.c1(x)))))
        return self.fc(torch.flatten(torch.nn.functional.adaptive_avg_pool2d(torch.relu(x + y), 1), 1))


def test_resnet_block_inference_f32():
    torch.manual_seed(0)
    model = _ResBlock().eval()
    for bn in (model.stem[1], model.b1, model.b2):
        bn.running_mean.uniform_(-0.5, 0.5)
        bn.running_var.uniform_(0.5, 1.5)
    x = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    lowered = check_against_eager(model, x, table=MODEL)
    assert lowered.coverage >= 0.9, lowered.fallback


def test_transformers_resnet_inference_f32():
    """transformers' ResNetModel (a small config: stem, two stages of basic blocks, pooler)."""
    torch.manual_seed(0)
    config = transformers.ResNetConfig(embedding_size=16, hidden_sizes=[16, 32], depths=[1, 1], layer_type="basic")
    model = transformers.ResNetModel(config).eval()
    x = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    lowered = check_against_eager(model, x, table=MODEL)
    assert lowered.coverage >= 0.9, lowered.fallback


def test_mlp_training_step_gradients():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 32), torch.nn.Tanh(),
                                torch.nn.LayerNorm(32), torch.nn.Linear(32, 4))
    x = torch.randn(8, 16, generator=torch.Generator().manual_seed(0))
    lowered = check_against_eager(model, x, table=MODEL, train=True, params=list(model.parameters()))
    assert len(lowered.reports) == 2 and lowered.regions >= 2   # forward and backward each run graphc regions


@pytest.mark.parametrize("masked", [False, True], ids=["", "masked"])
@pytest.mark.parametrize("make", [_bert, _gpt2], ids=["bert", "gpt2"])
def test_transformer_training_step_gradients(make, masked):
    """One training step (dropout off: eager and compiled must draw nothing), with and
    without a padding mask: the output and every parameter gradient against eager."""
    torch.manual_seed(0)
    off = dict(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0) if make is _bert else \
        dict(resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    model = make(**off).train()
    mask = _mask() if masked else None
    lowered = check_against_eager(lambda i: model(i, attention_mask=mask).last_hidden_state, _ids(2), table=MODEL,
                                  train=True, params=list(model.parameters()))
    # (SDPA forward with its logsumexp and backward, LayerNorm, GELU, the embeddings and their backward in graphc)
    assert len(lowered.reports) == 2 and lowered.coverage >= 0.9, lowered.fallback
    assert not {"aten::embedding", "aten::embedding_dense_backward"} & set(lowered.fallback), lowered.fallback


def test_resnet_training_step_gradients_and_running_statistics():
    """transformers' ResNetModel (a stem and two basic stages, batch 2, 32x32 images):
    one training step, the output and every parameter gradient against eager, and the
    batch norms' running statistics after it, num_batches_tracked too (an s64 Add in
    graphc).  What stays in torch: the max pool with its indices."""
    torch.manual_seed(0)
    config = transformers.ResNetConfig(embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1], layer_type="basic")
    model = transformers.ResNetModel(config).train()
    twin = transformers.ResNetModel(config).train()
    twin.load_state_dict(model.state_dict())
    x = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    lowered = check_against_eager(lambda t: model(t).last_hidden_state, x, table=MODEL, train=True,
                                  params=list(model.parameters()))
    assert not {"aten::convolution_backward", "aten::native_batch_norm_backward",
                "aten::_native_batch_norm_legit_functional"} & set(lowered.fallback), lowered.fallback
    assert lowered.coverage >= 0.95 and "aten::add.Tensor" not in lowered.fallback, lowered.fallback
    for _ in range(2):   # (check_against_eager stepped the model twice: eager, then compiled)
        twin(x)
    for (name, got), (_, want) in zip(model.named_buffers(), twin.named_buffers(), strict=True):
        assert_tensors_close(got, want, MODEL, name)
