"""A rank's rows of a run split by rows (airplan_qo/runtime/row_split.py): what it holds, and
that its pieces compute what one process computes on the whole stack, bit for bit: the noise
drawn 16 rows at a time, the average model a slab of columns at a time, the mixing of the
rank's share of the links. (The runs over several processes: tests/runtime/test_distributed.py.)"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from airplan_qo.plans.topology import TopologySpec, build
from airplan_qo.runtime.channel import Channel
from airplan_qo.runtime.gossip import DSGD, LinkSet, Operator, dsgd_mix, link_schedule
from airplan_qo.runtime.row_split import (COLUMN_SLAB, HaloNoise, LocalLinks, column_mean,
                                          draw_rows, global_exchange, held_rows, local_round,
                                          splits, table_rows)

CPU = torch.device("cpu")


@pytest.mark.parametrize("rows", [1, 15, 16, 17, 50])
@pytest.mark.parametrize("d", [16, 33, 2634, 7850])
def test_noise_drawn_16_rows_at_a_time_is_the_whole_draw(rows, d):
    whole = torch.randn(rows, d, generator=torch.Generator().manual_seed(7))
    gen = torch.Generator().manual_seed(7)
    pieces = torch.cat([torch.randn(min(16, rows - s), d, generator=gen)
                        for s in range(0, rows, 16)])
    assert torch.equal(pieces, whole)
    # the generator ends where the whole draw leaves it
    after = torch.Generator().manual_seed(7)
    torch.randn(rows, d, generator=after)
    assert torch.equal(torch.randn(5, generator=gen), torch.randn(5, generator=after))


def test_noise_drawn_row_by_row_is_not_the_whole_draw():
    """Why the pieces are 16 rows: a draw of fewer than 16 numbers is made another way."""
    gen = torch.Generator().manual_seed(7)
    rows = torch.cat([torch.randn(1, 33, generator=gen) for _ in range(4)])
    assert not torch.equal(rows, torch.randn(4, 33, generator=torch.Generator().manual_seed(7)))


@pytest.mark.parametrize("d", [5, 40, 4810])
@pytest.mark.parametrize("first, last", [(0, 0), (0, 37), (3, 20), (16, 32), (30, 37)])
def test_draw_rows_keeps_the_rows_asked_and_advances_as_the_whole_draw(d, first, last):
    mine = Channel("ota", snr_db=5.0, g_th=0.2, dropout=0.0, seed=3)
    one = Channel("ota", snr_db=5.0, g_th=0.2, dropout=0.0, seed=3)
    got = draw_rows(mine, 37, d, first, last)
    whole = one.randn(37, d)
    assert torch.equal(got, whole[first:last])
    assert torch.equal(mine.randn(3, d), one.randn(3, d))


def test_halo_noise_draws_the_round_once_whoever_asks():
    channel = Channel("ota", snr_db=5.0, g_th=0.2, dropout=0.0, seed=3)
    one = Channel("ota", snr_db=5.0, g_th=0.2, dropout=0.0, seed=3)
    receivers = np.array([1, 4, 5, 9, 12])
    noise = HaloNoise(channel, lambda: receivers, 4, 10, draws=True)
    assert noise.noisy and noise.snr == channel.snr        # the channel's settings
    got = noise.randn(3, 20)
    assert torch.equal(got, one.randn(5, 20)[1:4])
    noise.finish(20)                                       # already drawn: nothing more
    with pytest.raises(RuntimeError, match="unexpected noise draw"):
        noise.randn(3, 20)
    # a rank none of whose receivers drew: finish draws the round's noise and drops it
    idle = HaloNoise(channel, lambda: receivers, 20, 30, draws=True)
    idle.finish(20)
    one.randn(5, 20)
    assert torch.equal(channel.randn(2, 20), one.randn(2, 20))
    with pytest.raises(RuntimeError, match="2 noise rows asked, 3 receivers held"):
        HaloNoise(channel, lambda: receivers, 4, 10, draws=True).randn(2, 20)


@pytest.mark.parametrize("d", [3, 33, 4810])
def test_the_quantisers_uniforms_are_the_held_rows_of_the_whole_draw(d):
    mine = Channel("ideal", snr_db=5.0, g_th=0.2, dropout=0.0, seed=4)
    one = Channel("ideal", snr_db=5.0, g_th=0.2, dropout=0.0, seed=4)
    held = np.array([0, 5, 15, 16, 17, 36])
    noise = HaloNoise(mine, lambda: held, 15, 18, draws=False, held=held, n=37)
    whole = torch.rand(37, d, generator=one.gen)
    assert torch.equal(noise.uniform((6, d)), whole[torch.from_numpy(held)])
    assert torch.equal(torch.rand(3, generator=mine.gen), torch.rand(3, generator=one.gen))
    with pytest.raises(RuntimeError, match="unexpected uniform draw"):
        noise.uniform((5, d))


@pytest.mark.parametrize("n", [1, 3, 17, 100, 1000])
@pytest.mark.parametrize("d", [7, 100, 4810])
@pytest.mark.parametrize("slab", [64, 256, 1024])
def test_the_average_model_by_slabs_of_columns_is_the_mean_of_the_stack(n, d, slab):
    gen = torch.Generator().manual_seed(n + d)
    x = torch.randn(n, d, generator=gen) * torch.rand(n, 1, generator=gen) * 10
    seen = []

    def columns(c0, c1):
        seen.append((c0, c1))
        return x[:, c0:c1].contiguous()
    assert torch.equal(column_mean(d, slab, columns), x.mean(dim=0))
    assert seen[0] == (0, min(d, slab)) and seen[-1][1] == d


def test_a_slab_is_a_multiple_of_64_columns():
    with pytest.raises(ValueError, match="multiple of 64"):
        column_mean(100, 100, lambda a, b: torch.zeros(3, b - a))
    assert COLUMN_SLAB == 64


def _links(family: str, n: int) -> list[tuple[np.ndarray, np.ndarray]]:
    return [(ls.recv, ls.send) for ls in link_schedule(build(TopologySpec.create(family, n)))]


def test_a_ring_block_holds_itself_and_its_two_outside_neighbours():
    held = held_rows(10, 20, _links("ring", 30))
    assert held.tolist() == list(range(9, 21))
    assert held_rows(0, 15, _links("ring", 30)).tolist() == list(range(0, 16)) + [29]


def test_which_runs_are_split_by_rows():
    ring30, ring12 = _links("ring", 30), _links("ring", 12)
    base = dict(algorithm="dsgd", device=CPU, clique_averaging=False)
    assert splits(n=30, links=ring30, **base)
    # a ring of 12's operators take the dense form in one process: not split
    assert not splits(n=12, links=ring12, **base)
    for rule in ("matcha", "push_sum", "choco"):
        assert splits(n=30, links=ring30, **{**base, "algorithm": rule})
    assert not splits(n=30, links=ring30, **{**base, "algorithm": "choco", "mask": "topk"})
    for other in ("fedavg", "fedprox", "paper_literal", "gradient_tracking", "dllr_oa"):
        assert not splits(n=30, links=ring30, **{**base, "algorithm": other})
    assert not splits(n=30, links=ring30, **{**base, "device": torch.device("cuda")})
    assert not splits(n=30, links=ring30, **{**base, "clique_averaging": True})
    assert splits(n=32, links=_links("one_peer_exponential", 32), **base)


@pytest.mark.parametrize("family, n, lo, hi", [("ring", 30, 10, 20), ("ring", 31, 0, 11),
                                               ("one_peer_exponential", 32, 16, 32),
                                               ("one_peer_exponential", 32, 8, 16)])
def test_a_ranks_share_of_the_links_mixes_its_rows_as_the_whole_stack(family, n, lo, hi):
    """D-SGD over the air (noise, shrinkage, drops) on the rank's table (its block first, then
    the round's senders) equals the block's rows of the single-process round, and the round's
    exchange is the single-process one."""
    topology = build(TopologySpec.create(family, n))
    schedule = link_schedule(topology)
    rows = table_rows(lo, hi, [(ls.recv, ls.send) for ls in schedule])
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(n, 50, generator=gen)
    ref = x[0].clone()
    for t, links in enumerate(schedule[:3]):
        one = Channel("ota", snr_db=0.0, g_th=0.3, dropout=0.15, seed=t)
        mine = Channel("ota", snr_db=0.0, g_th=0.3, dropout=0.15, seed=t)
        rl = one.draw(n, links.u, links.v)
        assert np.array_equal(mine.draw(n, links.u, links.v).up, rl.up)
        whole = DSGD(n, 50, x0=ref, payload="difference").communicate(x.clone(), links, rl, one)
        share = LocalLinks(links, lo, hi, rows)
        assert share.held[:hi - lo].tolist() == list(range(lo, hi))
        noise = HaloNoise(mine, lambda: np.flatnonzero(links.receiver_stats(share.seen)[1] > 0),
                          lo, hi, draws=True)
        part = DSGD(rows, 50, x0=ref, payload="difference").communicate(
            x[torch.from_numpy(share.held)].clone(), share, local_round(rl, share.held), noise)
        noise.finish(50)
        assert torch.equal(part.x[:hi - lo], whole.x[lo:hi])
        assert torch.equal(mine.randn(4), one.randn(4))           # in step
        every = global_exchange(DSGD(n, 50), links, share.seen, 50, part.x)
        for key in ("k_recv", "n_tx", "link_nnz", "link_index_bits"):
            assert np.array_equal(getattr(every, key), getattr(whole, key)), key


def test_the_share_mixes_in_the_clients_order_not_the_tables():
    """Row i of the share's operator adds its terms in the clients' order, as the whole
    operator does; in the table's order (the block first) the sums round differently."""
    topology = build(TopologySpec.create("ring", 30))
    links = LinkSet(topology)
    share = LocalLinks(links, 10, 20, 12)
    assert share.held.tolist() == list(range(10, 20)) + [9, 20]
    x = torch.randn(30, 777, generator=torch.Generator().manual_seed(2)) * 1e3
    up = np.ones(links.recv.size, dtype=bool)
    up[::3] = False
    mine = up[share.lids]
    whole = dsgd_mix(x, links, up)
    part = dsgd_mix(x[torch.from_numpy(share.held)], share, mine)
    assert torch.equal(part[:10], whole[10:20])
    # the same operator with its entries in the table's order (the block before the halo)
    diag = share.diag.copy()
    np.add.at(diag, share.recv[~mine], share.w[~mine])
    table_order = Operator(share.n, share.recv[mine], share.send[mine], share.w[mine], diag,
                           columns=np.arange(share.n))
    other = table_order.apply(x[torch.from_numpy(share.held)])
    assert torch.allclose(other[:10], whole[10:20])
    assert not torch.equal(other[:10], whole[10:20])


def test_a_tables_rows_are_its_block_and_the_most_senders_of_a_round():
    peer = _links("one_peer_exponential", 32)
    assert held_rows(8, 16, peer).size == 24      # over the period
    assert table_rows(8, 16, peer) == 16           # one sender per client and round
    assert table_rows(10, 20, _links("ring", 30)) == 12
    with pytest.raises(ValueError, match="12 rows needed, the table has 11"):
        LocalLinks(LinkSet(build(TopologySpec.create("ring", 30))), 10, 20, 11)
