"""lowbit.nn's embeddings: lookups against float64 references and the format's error, losslessness for {-1, 1}
tables, lookups that dequantize only the gathered rows, state dicts, 32-bit optimizer states, bad arguments."""

import copy
import io
import warnings

import pytest

torch = pytest.importorskip("torch")

import backends  # noqa: E402
import lowbit.functional as F  # noqa: E402
import lowbit.nn as lnn  # noqa: E402
import lowbit.optim as optim  # noqa: E402
from lowbit.nn import _calls  # noqa: E402
from nn_reference import UNIT, assert_within, fp4bit_error  # noqa: E402

CUDA_REASON = backends.torch_cuda_reason()
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(CUDA_REASON is not None, reason=str(CUDA_REASON)))]
QUANTIZED = [
    (lnn.Embedding8bit, None),
    (lnn.EmbeddingFP4, torch.uint8),
    (lnn.EmbeddingFP4, torch.float32),
    (lnn.EmbeddingNF4, torch.uint8),
    (lnn.EmbeddingNF4, torch.bfloat16),
]
QUANTIZED_IDS = ["int8", "fp4-uint8", "fp4-float32", "nf4-uint8", "nf4-bfloat16"]
SHAPES = [(), (7,), (3, 5), (2, 3, 4)]


def _table(vocab, dim, seed, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(vocab, dim, generator=g).to(dtype)


def _tokens(vocab, shape, seed, device):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab, shape, generator=g).to(device)


def _quantized(cls, storage, vocab, dim, table, device, **kw):
    """``cls`` holding ``table``, quantized on ``device`` (bitsandbytes' order: load floats, then move)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the whole-table lookup's warning, tested on its own
        e = cls(vocab, dim, **kw) if storage is None else cls(vocab, dim, quant_storage=storage, **kw)
    e.load_state_dict({"weight": table})
    return e.to(device)


# --------------------------------------------------------------- Embedding8bit


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("vocab,dim", [(1, 1), (37, 7), (128, 64), (5, 130)])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=["fp32", "fp16", "bf16"])
def test_embedding8bit_against_float64(device, vocab, dim, shape, dtype):
    table = _table(vocab, dim, 1, dtype)
    e = _quantized(lnn.Embedding8bit, None, vocab, dim, table, device, dtype=dtype)
    x = _tokens(vocab, shape, 2, device)
    y = e(x)
    assert y.shape == (*shape, dim) and y.dtype == dtype and y.device.type == device
    CB, SCB = e.weight.data.cpu(), e.weight.SCB.cpu()
    assert CB.dtype == torch.int8 and tuple(SCB.shape) == (vocab,)
    # the stored rows against float64: half a step of the row's absmax, after the float16 cast bitsandbytes makes
    w64 = table.double()
    absmax = w64.abs().amax(1, keepdim=True)
    assert_within(CB.double() * SCB.double()[:, None] / 127, w64, absmax / 254 * 1.0001 + w64.abs() * 2.0**-11,
                  "int8 rows")
    # the lookup against CB · SCB / 127 in float64 for the gathered rows: float32 math, then the output's rounding
    idx = x.cpu().long()
    ref = CB.double()[idx] * SCB.double()[idx][..., None] / 127
    assert_within(y.cpu(), ref, ref.abs() * (UNIT[dtype] + 4 * 2.0**-24), "Embedding8bit lookup")


# --------------------------------------------------------------- Embedding4bit


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("quant_type", ["nf4", "fp4"])
@pytest.mark.parametrize("storage", [torch.uint8, torch.float32, torch.bfloat16], ids=["uint8", "fp32", "bf16"])
# vocab · dim a multiple of 8 where the blocksize does not divide dim: the bytes then fill float32 storage
@pytest.mark.parametrize("vocab,dim,blocksize", [(3, 64, 64), (37, 128, 64), (129, 96, 32), (40, 65, 64),
                                                 (8, 33, 32)])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_embedding4bit_against_float64(device, quant_type, storage, vocab, dim, blocksize, shape):
    table = _table(vocab, dim, 3)
    e = _quantized(lnn.Embedding4bit, storage, vocab, dim, table, device, quant_type=quant_type,
                   blocksize=blocksize)
    assert e.weight.dtype == storage and e.weight.bnb_quantized and e.weight.quant_state is e.quant_state
    x = _tokens(vocab, shape, 4, device)
    y = e(x)
    assert y.shape == (*shape, dim) and y.dtype == torch.float32 and y.device.type == device
    idx = x.cpu().long()
    # within half a table gap of each element's block absmax (blocks over the flattened table)
    bound = fp4bit_error(table, quant_type, blocksize, nested=False)
    assert_within(y.cpu(), table.double()[idx], bound[idx], f"Embedding4bit {quant_type} lookup")
    # and exactly the rows of the whole table's dequantization
    whole = F.dequantize_4bit(e.weight.data, e.weight.quant_state).cpu()
    assert torch.equal(y.cpu(), whole[idx])


def test_embedding4bit_storage_the_codes_do_not_fill_is_a_clear_error():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the whole-table lookup's warning
        e = lnn.EmbeddingNF4(37, 65, quant_storage=torch.float32)
    e.load_state_dict({"weight": _table(37, 65, 3)})
    with pytest.raises(ValueError, match=r"1203 packed bytes do not fill whole float32 elements \(quant_storage\)"):
        e.cpu()


@pytest.mark.parametrize("dim,blocksize,gathered", [(128, 64, True), (96, 32, True), (65, 64, False)])
def test_embedding4bit_dequantizes_only_the_gathered_rows(monkeypatch, dim, blocksize, gathered):
    e = _quantized(lnn.EmbeddingNF4, torch.uint8, 50, dim, _table(50, dim, 5), "cpu", blocksize=blocksize)
    shapes = []
    real = _calls.ops.dequantize_4bit

    def spy(packed, qs):
        shapes.append(tuple(qs.shape))
        return real(packed, qs)

    monkeypatch.setattr(_calls.ops, "dequantize_4bit", spy)
    e(torch.tensor([[3, 7, 3]]))
    assert shapes == ([(3, dim)] if gathered else [(50, dim)])


@pytest.mark.parametrize("cls", [lnn.EmbeddingNF4, lnn.EmbeddingFP4, lnn.Embedding4bit])
def test_embedding4bit_warns_when_the_blocksize_does_not_divide_the_dim(cls):
    with pytest.warns(UserWarning, match=f"{cls.__name__}: embedding_dim 65 is not a multiple of the blocksize 64"):
        cls(8, 65)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cls(8, 128)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
def test_embedding4bit_output_has_the_module_dtype(dtype):
    table = _table(16, 64, 6, dtype)
    e = _quantized(lnn.EmbeddingNF4, torch.uint8, 16, 64, table, "cpu", dtype=dtype)
    assert e.quant_state.dtype == dtype
    x = torch.tensor([0, 15, 4])
    y = e(x)
    assert y.dtype == dtype
    whole = F.dequantize_4bit(e.weight.data, e.quant_state)
    assert torch.equal(y, whole[x])


def test_embedding4bit_restores_a_dropped_quant_state():
    e = _quantized(lnn.Embedding4bit, torch.uint8, 64, 32, _table(64, 32, 7), "cpu")
    x = torch.tensor([1, 2])
    before = e(x)
    e.weight.quant_state = None  # what an FSDP wrapper leaves behind
    assert torch.equal(e(x), before)
    assert e.weight.quant_state is e.quant_state


# ------------------------------------------------------- both quantized kinds


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("cls,storage", QUANTIZED, ids=QUANTIZED_IDS)
@pytest.mark.parametrize("dim", [64, 65])
@pytest.mark.parametrize("shape", [(10,), (10, 10), (10, 10, 10)], ids=str)
def test_quantized_embeddings_are_lossless_for_plus_minus_one(device, cls, storage, dim, shape):
    g = torch.Generator().manual_seed(8)
    table = (torch.randn(128, dim, generator=g) > 0).float() * 2 - 1
    base = torch.nn.Embedding(128, dim, _weight=table, _freeze=True).to(device)
    e = _quantized(cls, storage, 128, dim, table, device)
    x = _tokens(128, shape, 9, device)
    assert torch.equal(e(x), base(x))


@pytest.mark.parametrize("cls,storage", QUANTIZED, ids=QUANTIZED_IDS)
def test_quantized_embeddings_match_bitsandbytes(cls, storage):
    bnb = pytest.importorskip("bitsandbytes")
    for dim in (64, 65):
        table = _table(40, dim, 10)  # 40 · dim a multiple of 8: the codes fill float32 storage
        ours = _quantized(cls, storage, 40, dim, table, "cpu")
        theirs = _quantized(getattr(bnb.nn, cls.__name__), storage, 40, dim, table, "cpu")
        x = _tokens(40, (4, 6), 11, "cpu")
        # int8: bitsandbytes scales by SCB / 127, lowbit by SCB · (1 / 127): one float32 rounding apart
        torch.testing.assert_close(ours(x), theirs(x), rtol=2.0**-22, atol=0.0)


@pytest.mark.parametrize("cls,storage", QUANTIZED, ids=QUANTIZED_IDS)
@pytest.mark.parametrize("dim", [64, 65])
def test_quantized_embeddings_trace_under_torch_compile(cls, storage, dim):
    e = _quantized(cls, storage, 40, dim, _table(40, dim, 21), "cpu")
    x = _tokens(40, (3, 5), 22, "cpu")
    torch._dynamo.reset()
    compiled = torch.compile(e, fullgraph=True, backend="eager")  # tracing is what is tested, not codegen
    assert torch.equal(compiled(x), e(x))


@pytest.mark.parametrize("cls,storage", QUANTIZED, ids=QUANTIZED_IDS)
def test_quantized_embeddings_refuse_to_save_a_state_dict(cls, storage):
    e = _quantized(cls, storage, 8, 64, _table(8, 64, 12), "cpu")
    with pytest.raises(NotImplementedError, match=f"{cls.__name__}: saving a state dict is not implemented"):
        e.state_dict()
    with pytest.raises(NotImplementedError, match=cls.__name__):
        cls(8, 64).state_dict()


@pytest.mark.parametrize("cls,storage", QUANTIZED, ids=QUANTIZED_IDS)
def test_quantized_embeddings_load_a_float_state_dict_and_deepcopy(cls, storage):
    base = torch.nn.Embedding(20, 64)
    e = _quantized(cls, storage, 20, 64, base.state_dict()["weight"], "cpu")
    x = torch.tensor([[0, 19], [5, 5]])
    clone = copy.deepcopy(e)
    assert torch.equal(clone(x), e(x))
    assert e(x).shape == (2, 2, 64)


@pytest.mark.parametrize("cls,storage", QUANTIZED, ids=QUANTIZED_IDS)
def test_quantized_embeddings_before_quantization_say_so(cls, storage):
    e = cls(8, 64) if storage is None else cls(8, 64, quant_storage=storage)
    with pytest.raises(RuntimeError, match=f"{cls.__name__}: the weight is not quantized yet"):
        e(torch.tensor([1]))


@pytest.mark.parametrize("cls,storage", QUANTIZED, ids=QUANTIZED_IDS)
def test_quantized_embeddings_reject_float_indices(cls, storage):
    e = _quantized(cls, storage, 8, 64, _table(8, 64, 13), "cpu")
    with pytest.raises(TypeError, match=rf"{cls.__name__}: the input must hold int64 or int32 indices "
                                        r"\(got torch.float32\)"):
        e(torch.tensor([1.0]))
    with pytest.raises(TypeError, match=rf"{cls.__name__}: the input must be a tensor of indices \(got list\)"):
        e([1])


@pytest.mark.parametrize("cls,storage", QUANTIZED, ids=QUANTIZED_IDS)
def test_quantized_embeddings_take_int32_indices_and_refuse_out_of_range_ones(cls, storage):
    e = _quantized(cls, storage, 8, 64, _table(8, 64, 20), "cpu")
    x = torch.tensor([[7, 0], [3, 3]])
    assert torch.equal(e(x.int()), e(x))
    with pytest.raises(IndexError):
        e(torch.tensor([8]))


# -------------------------------------------------- StableEmbedding, Embedding


def _layer_norm64(x, norm):
    x = x.double()
    mean = x.mean(-1, keepdim=True)
    var = x.var(-1, unbiased=False, keepdim=True)
    weight, bias = norm.weight.detach().cpu().double(), norm.bias.detach().cpu().double()
    return (x - mean) / torch.sqrt(var + norm.eps) * weight + bias


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("vocab,dim", [(1, 3), (37, 16), (100, 65)])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=["fp32", "fp16", "bf16"])
def test_stable_embedding_against_float64(device, vocab, dim, shape, dtype):
    torch.manual_seed(14)
    e = lnn.StableEmbedding(vocab, dim, device=device, dtype=dtype)
    with torch.no_grad():
        e.norm.weight.uniform_(0.5, 1.5)
        e.norm.bias.uniform_(-0.5, 0.5)
    x = _tokens(vocab, shape, 15, device)
    y = e(x)
    assert y.dtype == dtype and y.shape == (*shape, dim)
    ref = _layer_norm64(e.weight.detach().cpu()[x.cpu().long()], e.norm)
    assert_within(y.cpu(), ref, ref.abs() * UNIT[dtype] + 1e-5, "StableEmbedding")
    y.float().sum().backward()
    assert e.weight.grad is not None and e.norm.weight.grad is not None


def test_stable_embedding_and_embedding_initialise_like_bitsandbytes():
    torch.manual_seed(16)
    for cls in (lnn.StableEmbedding, lnn.Embedding):
        e = cls(400, 300, padding_idx=3)
        bound = (6.0 / (400 + 300)) ** 0.5  # xavier_uniform's
        assert e.weight.abs().max().item() <= bound and e.weight.abs().max().item() > 0.9 * bound
        assert torch.equal(e.weight[3], torch.zeros(300))
    s = lnn.StableEmbedding(10, 8)
    assert isinstance(s.norm, torch.nn.LayerNorm) and s.norm.normalized_shape == (8,)
    assert not hasattr(lnn.Embedding(10, 8), "norm")


@pytest.mark.parametrize("device", DEVICES)
def test_embedding_matches_torch(device):
    w = _table(30, 12, 17).to(device)
    ours = lnn.Embedding(30, 12, padding_idx=2, _weight=w.clone(), device=device)
    ref = torch.nn.Embedding(30, 12, padding_idx=2, _weight=w.clone(), device=device)
    x = _tokens(30, (4, 5), 18, device)
    assert torch.equal(ours(x), ref(x))
    ours(x).sum().backward()
    ref(x).sum().backward()
    assert torch.equal(ours.weight.grad, ref.weight.grad)


@pytest.mark.parametrize("cls", [lnn.StableEmbedding, lnn.Embedding])
def test_embeddings_register_their_weight_for_32bit_optimizer_states(cls):
    mng = optim.GlobalOptimManager.get_instance()
    e = cls(128, 64)
    assert (e, "weight", {"optim_bits": 32}) in mng.module_weight_config_triple
    plain = torch.nn.Embedding(128, 64)
    params = [e.weight, plain.weight]
    opt = optim.Adam8bit(params, lr=1e-3, min_8bit_size=4096)
    for p in params:
        p.grad = torch.randn_like(p)
    opt.step()
    assert opt.state[e.weight]["state1"].dtype == torch.float32
    assert opt.state[plain.weight]["state1"].dtype == torch.uint8


@pytest.mark.parametrize("cls", [lnn.StableEmbedding, lnn.Embedding])
def test_embeddings_state_dict_round_trip(cls):
    torch.manual_seed(19)
    a = cls(33, 20)
    if cls is lnn.StableEmbedding:
        with torch.no_grad():
            a.norm.bias.uniform_(-1, 1)
    buf = io.BytesIO()
    torch.save(a.state_dict(), buf)
    buf.seek(0)
    sd = torch.load(buf, weights_only=True)
    assert set(sd) == ({"weight", "norm.weight", "norm.bias"} if cls is lnn.StableEmbedding else {"weight"})
    b = cls(33, 20)
    b.load_state_dict(sd)
    x = torch.tensor([[0, 32, 7]])
    assert torch.equal(a(x), b(x))


# ------------------------------------------------------------ bad arguments


ALL = [lnn.StableEmbedding, lnn.Embedding, lnn.Embedding8bit, lnn.Embedding4bit, lnn.EmbeddingNF4, lnn.EmbeddingFP4]


@pytest.mark.parametrize("cls", ALL, ids=lambda c: c.__name__)
@pytest.mark.parametrize("args,error,message", [
    ((0, 8), ValueError, r"num_embeddings must be positive \(got 0\)"),
    ((8, -1), ValueError, r"embedding_dim must be positive \(got -1\)"),
    (("8", 8), TypeError, r"num_embeddings must be an int \(got str\)"),
    ((8, True), TypeError, r"embedding_dim must be an int \(got bool\)"),
])
def test_bad_sizes_name_the_module_and_argument(cls, args, error, message):
    with pytest.raises(error, match=f"{cls.__name__}: {message}"):
        cls(*args)


def test_bad_4bit_arguments():
    with pytest.raises(ValueError, match=r"^Embedding4bit: quant_type must be 'fp4' or 'nf4' \(got 'int4'\)"):
        lnn.Embedding4bit(8, 64, quant_type="int4")
    with pytest.raises(ValueError, match=r"^EmbeddingNF4: blocksize must be a power of two from 32 to 4096 "
                                         r"\(got 48\)"):
        lnn.EmbeddingNF4(8, 96, blocksize=48)
    with pytest.raises(TypeError, match=r"^EmbeddingFP4: quant_storage must be a torch.dtype \(got 'uint8'\)"):
        lnn.EmbeddingFP4(8, 64, quant_storage="uint8")


@pytest.mark.parametrize("cls", [lnn.StableEmbedding, lnn.Embedding])
def test_bad_pretrained_weight_shape(cls):
    with pytest.raises(ValueError, match=rf"{cls.__name__}: _weight must have shape \[8, 4\] \(got \[4, 8\]\)"):
        cls(8, 4, _weight=torch.zeros(4, 8))
