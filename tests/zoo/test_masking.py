"""MDLM training masks (`specdiff.training.objectives.masked.mask_tokens` on `training.data.mdlm_batch`): number
groups, grouped masking (a value is masked at every place it occurs), clean prefixes; and the drafter's
canvas-only logits match the full forward."""
import torch

from specdiff import zoo
from specdiff.drafters.masked import masked_logits
from specdiff.eval import tasks
from specdiff.training import data
from specdiff.training.data import number_groups
from specdiff.training.objectives.masked import mask_tokens


def mdlm_batch(problems, tokenizer):
    """training.data.mdlm_batch as a tuple: x0, key_mask, canvas_mask, groups, result_rank."""
    batch = data.mdlm_batch(problems, tokenizer)
    return batch["ids"], batch["keys"], batch["noisable"], batch["groups"], batch["result_rank"]


def mdlm_mask(batch, t, generator=None, prefix_prob=0.0, group_prob=0.0, result_prob=0.0, prefix_masking="all"):
    """mask_tokens on a tuple batch, the testbed's masking modes as arguments."""
    x0, keys, canvas, groups, rank = batch
    return mask_tokens(dict(ids=x0, keys=keys, noisable=canvas, groups=groups, result_rank=rank, prefix_prob=prefix_prob,
                            group_prob=group_prob, result_prob=result_prob, prefix_masking=prefix_masking), t, generator)


def _pieces_and_groups(text):
    tok = zoo.tokenizer()
    ids = tok(text, add_special_tokens=False).input_ids
    return tok.convert_ids_to_tokens(ids), number_groups(ids, tok)


def test_number_groups_by_value():
    pieces, groups = _pieces_and_groups("He has 5 * 12 = 60 cookies. He eats 33, so 60 - 33 = 27.")
    by_piece = list(zip(pieces, groups))
    sixty = [g for p, g in by_piece if p in ("\u25816",)]
    assert len(sixty) == 2 and sixty[0] == sixty[1] > 0  # both 60s share one group
    words = [g for p, g in by_piece if not p.lstrip("\u2581").isdigit()]
    assert set(words) == {0}  # non-digit tokens have no group
    # every digit token of a number has the number's group; different values differ
    values = {}
    for i, (p, g) in enumerate(by_piece):
        if p.startswith("\u2581") and p[1:].isdigit():
            digits = p[1:]
            j = i + 1
            while j < len(pieces) and pieces[j].isdigit():
                digits += pieces[j]
                assert groups[j] == g
                j += 1
            values.setdefault(digits, g)
            assert values[digits] == g
    assert len(set(values.values())) == len(values) == 5  # 5, 12, 60, 33, 27


def test_number_groups_leading_zeros_and_adjacent_numbers():
    _, groups = _pieces_and_groups("7 07 70 7")
    assert groups[0] == groups[1] == groups[2] == groups[5]  # 7, 07 and the last 7 are one value
    assert groups[3] == groups[4] != groups[0]  # 70 is another


def _batch(n=16):
    return mdlm_batch(tasks.arith_problems("validation", n), zoo.tokenizer())


def test_grouped_masking_masks_every_occurrence_of_a_value_together():
    x0, key_mask, canvas_mask, groups, _ = batch = _batch()
    assert ((groups > 0) <= canvas_mask).all()  # groups only on the canvas
    t = torch.full((x0.shape[0], 1), 0.5)
    for seed in range(5):
        masked, weight = mdlm_mask(batch, t, torch.Generator().manual_seed(seed), group_prob=1.0)
        assert torch.equal(weight, masked / t)
        for row in range(x0.shape[0]):
            for g in groups[row].unique().tolist():
                if g == 0:
                    continue
                in_group = masked[row][groups[row] == g]
                assert in_group.all() or not in_group.any()
    # and some values are masked, some not
    assert masked[groups > 0].any() and not masked[groups > 0].all()


def test_plain_masking_splits_values():
    x0, _, _, groups, _ = batch = _batch()
    t = torch.full((x0.shape[0], 1), 0.5)
    masked, _ = mdlm_mask(batch, t, torch.Generator().manual_seed(0), group_prob=0.0)
    split = 0
    for row in range(x0.shape[0]):
        for g in groups[row].unique().tolist():
            if g and 0 < int(masked[row][groups[row] == g].sum()) < int((groups[row] == g).sum()):
                split += 1
    assert split > 0  # independent per-token masking leaves part of a value visible


def test_masks_stay_on_the_canvas_and_respect_ratio():
    x0, _, canvas_mask, _, _ = batch = _batch(32)
    for group_prob, prefix_prob, result_prob in [(0.0, 0.0, 0.0), (1.0, 0.0, 0.0), (0.5, 0.5, 0.5), (0, 0, 1.0)]:
        masked, weight = mdlm_mask(batch, torch.full((32, 1), 0.5), None, prefix_prob, group_prob, result_prob)
        assert not masked[~canvas_mask].any()
        assert not weight[~masked].any() and (weight[masked] > 0).all()
    assert mdlm_mask(batch, torch.full((32, 1), 1.0), None, 0.0, 1.0)[0][canvas_mask].all()  # t = 1 masks all
    assert not mdlm_mask(batch, torch.zeros(32, 1), None, 0.0, 1.0)[0].any()  # t = 0 masks nothing


def test_clean_prefix_masks_only_after_a_cut():
    x0, _, canvas_mask, _, _ = batch = _batch(32)
    masked, weight = mdlm_mask(batch, torch.full((32, 1), 0.01), torch.Generator().manual_seed(0), prefix_prob=1.0,
                               group_prob=1.0)
    assert torch.equal(weight, masked.float())
    for row in range(32):
        cols = canvas_mask[row].nonzero().squeeze(1)
        row_mask = masked[row, cols]
        first = int(row_mask.float().argmax())
        assert row_mask[first:].all() and not row_mask[:first].any()  # any t: clean prefix, then all masked


def test_result_ranks_mark_values_not_in_the_prompt():
    tok = zoo.tokenizer()
    problem = tasks.arith_problems("validation", 2)[1]  # Ruby: 23 - 12 = 11, 3 * 2 = 6, 11 + 6 = 17, 17 * 2 = 34
    x0, _, canvas_mask, groups, rank = mdlm_batch([problem], tok)
    digits = tok.convert_ids_to_tokens(x0[0].tolist())
    value_rank = {}
    i = int(canvas_mask[0].nonzero()[0])
    while i < x0.shape[1]:
        if groups[0, i] == 0:
            i += 1
            continue
        end = i + 1
        while end < x0.shape[1] and groups[0, end] == groups[0, i] and not digits[end].startswith("\u2581"):
            end += 1
        value = "".join(d.lstrip("\u2581") for d in digits[i:end])
        assert len(set(rank[0, i:end].tolist())) == 1
        value_rank.setdefault(value, int(rank[0, i]))
        assert value_rank[value] == int(rank[0, i])  # one rank per value, at every occurrence
        i = end
    assert value_rank == {"23": 0, "12": 0, "3": 0, "2": 0, "11": 1, "6": 2, "17": 3, "34": 4}


def test_results_mode_masks_every_result_from_a_rank_on():
    x0, _, canvas_mask, groups, rank = batch = _batch(32)
    masked, weight = mdlm_mask(batch, torch.zeros(32, 1), torch.Generator().manual_seed(0), result_prob=1.0)
    assert (masked <= (rank > 0)).all()  # t = 0: only results are masked
    assert (weight[masked] == 1).all()
    for row in range(32):
        ranks = rank[row][masked[row]]
        if ranks.numel():
            first = int(ranks.min())
            assert torch.equal(masked[row], rank[row] >= first)  # every result from rank `first` on, everywhere


def test_masked_logits_columns_match_full_forward():
    model = zoo.load("masked-drafter")
    tok = zoo.tokenizer()
    torch.manual_seed(0)
    ids = torch.randint(5, len(tok), (2, 30))
    key_mask = torch.ones_like(ids, dtype=torch.bool)
    key_mask[1, :4] = False  # left padding in one row: the 4D mask path
    cols = torch.arange(20, 30)
    with torch.no_grad():
        full = masked_logits(model, ids, key_mask)
        part = masked_logits(model, ids, key_mask, cols)
        unpadded = masked_logits(model, ids[:1], key_mask[:1], cols)  # no padding: the unmasked path
    assert part.shape == (2, 10, len(tok))
    assert torch.allclose(part, full[:, cols], atol=1e-5)
    assert torch.allclose(unpadded, full[:1, cols], atol=1e-5)


def test_ratio_prefix_keeps_the_ratio_masks_after_the_cut():
    x0, _, canvas_mask, _, _ = batch = _batch(32)
    t = torch.full((32, 1), 0.5)
    plain, _ = mdlm_mask(batch, t, torch.Generator().manual_seed(0))
    masked, weight = mdlm_mask(batch, t, torch.Generator().manual_seed(0), prefix_prob=1.0, prefix_masking="ratio")
    assert (masked <= plain).all()  # the same draws, with the prefix cleared
    assert torch.equal(weight, masked / t)
    for row in range(32):
        cols = canvas_mask[row].nonzero().squeeze(1)
        cleared = (plain[row, cols] & ~masked[row, cols]).nonzero()
        if cleared.numel():
            last_cleared = int(cleared.max())
            assert torch.equal(masked[row, cols][last_cleared + 1:], plain[row, cols][last_cleared + 1:])


def test_bad_prefix_masking_is_refused():
    import pytest

    with pytest.raises(ValueError, match="prefix_masking"):
        mdlm_mask(_batch(2), torch.full((2, 1), 0.5), prefix_prob=0.5, prefix_masking="half")


def test_auxiliary_ar_loss_is_causal_on_the_bidirectional_drafter():
    """The masked drafter's auxiliary next-token loss runs the same (bidirectional, is_causal=False)
    weights under an explicit causal mask: a later token must not change an earlier logit there,
    while it does under the drafter's own bidirectional attention."""
    from specdiff.lm.masks import causal_mask
    from specdiff.training.objectives import OBJECTIVES
    from specdiff.training.objectives.heads import hidden

    tok = zoo.tokenizer()
    model = zoo.load("masked-drafter")
    problems = tasks.arith_problems("validation", 2)
    batch = data.ar_batch(problems, tok)
    input_ids, keys = batch["ids"], batch["keys"]
    changed = input_ids.clone()
    changed[:, -1] = (changed[:, -1] + 7) % len(tok)  # alter the last position only
    with torch.no_grad():  # the objective's own forward (training.objectives.heads)
        causal = [hidden(model, x, causal_mask(keys)) for x in (input_ids, changed)]
        full = [hidden(model, x, keys[:, None, None, :].expand(-1, 1, x.shape[1], -1)) for x in (input_ids, changed)]
    assert torch.allclose(causal[0][:, :-1], causal[1][:, :-1], atol=1e-5)
    assert not torch.allclose(full[0][:, :-1], full[1][:, :-1], atol=1e-3)
    mask = causal_mask(torch.tensor([[True, True, False]]))[0, 0]
    assert mask.tolist() == [[True, False, False], [True, True, False], [True, True, False]]
    loss = OBJECTIVES["next_token"](model, {**batch, "causal_mask": True})
    assert torch.isfinite(loss) and loss.item() > 0
