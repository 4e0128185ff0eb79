"""Statistics stop at the end of a generation (issue 30, item 2): a round that ends at EOS or at the token
budget counts only the drafted positions it emitted, never the ones past the end."""
from __future__ import annotations

import specdiff as sd
from specdiff import zoo

PROMPT = "There are 12 rocks in each of the 7 bags that Omar has. He uses 31 rocks. How many are left?\n"


def _self_drafting(eos_token_id):
    verifier = zoo.load("verifier")
    return sd.SpeculativeGenerator(sd.AutoregressiveDrafter(verifier, temperature=0.0),
                                   sd.Verifier(verifier, temperature=0.0), block_size=8,
                                   tokenizer=zoo.tokenizer(), eos_token_id=eos_token_id)


def test_a_round_cut_by_max_new_tokens_counts_only_the_emitted_tokens():
    out = _self_drafting([]).generate([PROMPT], max_new_tokens=3)  # the verifier drafting for itself: all accepted
    stats = out.stats[0]
    assert len(out.token_ids[0]) == 3
    assert stats.accepted == [3] and stats.drafted == [3]  # not the 8 drafted and accepted
    assert out.summary.mean_accepted == 3.0


def test_a_round_that_ends_at_an_early_eos_counts_only_up_to_it():
    first = _self_drafting([]).generate([PROMPT], max_new_tokens=2).token_ids[0]
    out = _self_drafting([first[1]]).generate([PROMPT], max_new_tokens=64)  # its 2nd token taken as EOS
    stats = out.stats[0]
    assert out.token_ids[0] == first[:2]
    assert stats.rounds == 1 and stats.accepted == [2] and stats.new_tokens == 2
