"""`memory context`: the memory a model on one branch should see now, within a budget."""

from __future__ import annotations

import json

import pytest

from scriptorium.errors import InvalidInput, NotFound
from scriptorium.tokens import count_tokens

from testkit import Cli

from branch_support import SID, falcon, say


@pytest.fixture(scope="module")
def mem(shared_homes):
    """One written conversation (the tests only read it), on each kind of home."""
    mem = falcon(shared_homes)
    # the conversation goes on about the budget: the recent turns the context answers to
    say(mem, "u5", "user", "Remind me of the Falcon budget before I book the caterer.")
    return mem


def test_context_puts_on_line_claims_first_and_labels_alternatives_with_block_ids(mem):
    ctx = mem.context(SID)
    branches = [b.branch for b in ctx.blocks]
    assert branches == sorted(branches, key=["on_line", "elsewhere", "alternative"].index)
    first_budget = next(b for b in ctx.blocks if "budget is" in b.text)
    assert first_budget.branch == "on_line" and "150" in first_budget.text
    alt = next(b for b in ctx.blocks if "160" in b.text)
    assert alt.branch == "alternative"
    line = next(x for x in ctx.markdown.splitlines() if "160" in x)
    assert line.startswith("- [on the original branch, before u2 was edited into u2e")
    for block in ctx.blocks:
        assert f"(^{block.block_id})" in ctx.markdown


def test_context_on_another_branch_prefers_that_branchs_claims(mem):
    ctx = mem.context(SID, "a2")
    first_budget = next(b for b in ctx.blocks if "budget is" in b.text)
    assert "160" in first_budget.text and first_budget.branch == "on_line"


@pytest.mark.parametrize("budget", [40, 80, 200, 2000])
def test_context_stays_within_the_token_budget_and_reports_its_size(mem, budget):
    ctx = mem.context(SID, budget=budget)
    assert ctx.tokens == count_tokens(ctx.markdown) <= budget
    assert ctx.head == "u5" and ctx.session_id == SID


def test_a_smaller_budget_keeps_a_prefix_of_the_larger_ones_choice(mem):
    big = [b.block_id for b in mem.context(SID, budget=2000).blocks]
    small = [b.block_id for b in mem.context(SID, budget=80).blocks]
    assert len(small) < len(big) and all(b in big for b in small)


def test_bad_budget_unknown_session_or_tip_are_refused(mem):
    with pytest.raises(InvalidInput):
        mem.context(SID, budget=3)
    with pytest.raises(NotFound):
        mem.context("nope")
    with pytest.raises(NotFound):
        mem.context(SID, "zz")


def test_cli_context_json_shape_and_markdown_view(mem):
    cli = Cli(mem.home)
    data = cli.json("memory", "context", SID, "--head", "a2", "--budget", "300")
    assert list(data) == ["session_id", "head", "tokens", "markdown", "blocks"]
    assert data["head"] == "a2" and data["tokens"] <= 300
    assert data["blocks"] and {"block_id", "branch", "text"} <= set(data["blocks"][0])
    text = cli("memory", "context", SID, "--head", "a2")
    assert text.exit_code == 0 and text.output.startswith("## Memory for this conversation")
    bad = cli("memory", "context", SID, "--head", "zz")
    assert bad.exit_code == 3 and len(bad.stderr.strip().splitlines()) == 1
    assert json.loads(cli("memory", "context", SID, "--json").stdout)["head"] == "u5"
