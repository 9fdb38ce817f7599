"""Back-to-back calls on one stream, each reading what the call before it
wrote, with and without programmatic dependent launch (PDL: on by default on
sm_90+, off with SPARSETOPK_NV_PATH=no-pdl). Under PDL a call's blocks start
while the previous kernel still runs; each kernel must wait for it before its
first read. The producer's outputs are reset to sentinels (+inf values,
index -7) by a torch kernel before every producer call, so a consumer that
reads early sees the sentinels and its answer differs from the reference
applied, after a sync, to what the producer finally wrote. Eager and
graph-replayed. Skips without CUDA."""

import pytest
import torch
from nv_small_k import plan, set_path

import sparsetopk

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

NV = "nvidia-sm100"


@pytest.fixture(params=["auto", "no-pdl"])
def path(request, monkeypatch):
    return set_path(monkeypatch, request.param)


# (rows, width, k of the producer): the sampled-rows kernel, the cluster
# kernel, the balanced split (three kernels; the final one reads the chunk
# size the gather kernel wrote), the warp kernel, the tile kernel (which
# works out its geometry before the wait; it is also the consumer of the
# 7- and 64-row chains)
SHAPES = [(512, 65536, 2048), (7, 1 << 20, 2048), (48, 1 << 18, 2048), (4096, 4096, 64), (64, 1344, 64)]


def _chain(x, k1, bufs):
    """producer topk -> consumer topk over its values -> merge of its lists."""
    idx1, val1, idx2, val2, idx3, val3 = bufs
    rows = x.shape[0]
    idx1.fill_(-7)
    val1.fill_(float("inf"))
    sparsetopk.topk(x, k1, order="any", return_values=True, backend=NV, out=(idx1, val1))
    sparsetopk.topk(val1, 16, order="rank", return_values=True, backend=NV, out=(idx2, val2))
    R = 4
    sparsetopk.merge(idx1.view(rows, R, k1 // R), val1.view(rows, R, k1 // R), 32, order="rank",
                     backend=NV, out=(idx3, val3))


def _runs(chain, inputs, graph, reps=3):
    """Runs chain(inputs[j]) for each j, reps times over: eagerly, or by
    replaying one CUDA graph captured per input (after a warm-up call outside
    the capture: plans, workspaces). Yields (rep, j) once that call is done."""
    graphs = []
    if graph:
        chain(inputs[0])
        torch.cuda.synchronize()
        for x in inputs:
            gr = torch.cuda.CUDAGraph()
            with torch.cuda.graph(gr):
                chain(x)
            graphs.append(gr)
    for rep in range(reps):
        for j, x in enumerate(inputs):
            if graph:
                graphs[j].replay()
            else:
                chain(x)
            torch.cuda.synchronize()
            yield rep, j


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"{s[0]}x{s[1]}k{s[2]}")
@pytest.mark.parametrize("graph", [False, True], ids=["eager", "graph"])
def test_consumer_sees_producer_writes(path, shape, graph):
    rows, width, k1 = shape
    dev = torch.device("cuda")
    g = torch.Generator(device=dev).manual_seed(rows + width)
    xs = [torch.randn(rows, width, device=dev, generator=g) for _ in range(2)]
    bufs = (torch.empty(rows, k1, dtype=torch.int32, device=dev), torch.empty(rows, k1, device=dev),
            torch.empty(rows, 16, dtype=torch.int32, device=dev), torch.empty(rows, 16, device=dev),
            torch.empty(rows, 32, dtype=torch.int32, device=dev), torch.empty(rows, 32, device=dev))
    for rep, j in _runs(lambda x: _chain(x, k1, bufs), xs, graph):
        x = xs[j]
        idx1, val1, idx2, val2, idx3, val3 = (b.clone() for b in bufs)
        assert (idx1 >= 0).all() and torch.isfinite(val1).all()
        want2 = sparsetopk.topk(val1, 16, order="rank", return_values=True, backend="reference")
        assert torch.equal(idx2, want2.indices), (rep, j)
        assert torch.equal(val2, want2.values), (rep, j)
        R = 4
        want3 = sparsetopk.merge(idx1.view(rows, R, k1 // R), val1.view(rows, R, k1 // R), 32, order="rank",
                                 backend="reference")
        assert torch.equal(idx3, want3.indices), (rep, j)
        assert torch.equal(val3, want3.values), (rep, j)
        # and the chain as a whole: the top 16 of x, through the producer's list
        top = torch.topk(x, 16, dim=1).values
        assert torch.equal(val2, top), (rep, j)
    assert (rep, j) == (2, 1)  # every run was checked


@pytest.mark.parametrize("graph", [False, True], ids=["eager", "graph"])
def test_split_reads_lengths_a_call_wrote(path, graph):
    """The balanced split's gather kernel builds its row tables from the
    lengths before its launch wait (it follows the sample kernel, which waits
    first). Here the lengths ARE the previous call's output: a k = 1 top-k
    whose index per row is the length wanted, into a buffer preset to the
    full width before each producer call. A consumer reading them early sees
    the full width and keeps columns past the length (they hold the row's
    largest scores here, so its answer then differs)."""
    rows, width, k = 48, 1 << 18, 2048
    assert plan(rows, width, k)["balanced"]
    dev = torch.device("cuda")
    g = torch.Generator(device=dev).manual_seed(11)
    want_len = [torch.randint(3000, width - 8192, (rows,), generator=g, device=dev) for _ in range(2)]
    ys = []
    for wl in want_len:
        y = torch.rand(rows, width, device=dev, generator=g)
        y[torch.arange(rows, device=dev), wl] = 2.0  # the producer's top-1 index: row r's length
        ys.append(y)
    x = torch.randn(rows, width, device=dev, generator=g)
    x[:, width - 8192:] = 100.0  # past every length: only a consumer with stale (full) lengths takes these
    lens = torch.empty(rows, 1, dtype=torch.int32, device=dev)
    out = torch.empty(rows, k, dtype=torch.int32, device=dev)

    def chain(y):
        lens.fill_(width)
        sparsetopk.topk(y, 1, order="rank", backend=NV, out=lens)
        sparsetopk.topk(x, k, lengths=lens.view(rows), order="any", backend=NV, out=out)

    for rep, j in _runs(chain, ys, graph):
        got_len = lens.view(rows).clone()
        assert torch.equal(got_len.long(), want_len[j]), (rep, j)
        want = sparsetopk.topk(x, k, lengths=got_len, order="any", backend="reference").indices
        assert torch.equal(out.sort(dim=1).values, want.sort(dim=1).values), (rep, j)
    assert (rep, j) == (2, 1)  # every run was checked
