"""The session page in a real browser (headless Chromium): what it draws is what the store and
the marks say, and a person can select, read, search and walk it with the keyboard."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from scriptorium.demo import SESSION
from scriptorium.memory.citations import citation_map
from scriptorium.memory.records import MARK_KEY
from scriptorium.view import write_page
from viewkit import FAILED, LONG_RUN, SHOTS

TALL = {"width": 1366, "height": 2600}  # every row of the small session in view at once
LAPTOP = {"width": 1366, "height": 768}


@pytest.fixture(scope="module")
def pages(view_home: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("pages")
    memory = view_home["memory"]
    return {sid: Path(write_page(memory, sid, out / f"{sid}.html")["path"])
            for sid in (SESSION, FAILED)}


def open_page(browser: Any, path: Path, viewport: dict[str, int] = TALL):
    page = browser.new_page(viewport=viewport)
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto(path.as_uri())
    page.wait_for_selector('body[data-ready="1"]', timeout=10_000)
    page.errors = errors  # type: ignore[attr-defined]
    return page


def selected_id(page) -> str:
    active = page.get_attribute("#graph", "aria-activedescendant")
    return page.get_attribute(f"#{active}", "data-node") or active


def expected_state(node, workspace_id: str) -> str:
    """What memory did with a node, read straight off the stored node (not via the model)."""
    md = node.metadata
    if "covers_ids" in md:
        return "summary"
    if node.role == "code":
        return "tool"
    if md.get("display") == "runtime":
        return "runtime"
    return "written" if md.get(MARK_KEY) == workspace_id else "pending"


def test_every_node_is_drawn_once_in_the_colour_of_what_memory_did_with_it(browser, pages,
                                                                           view_home):
    memory = view_home["memory"]
    nodes = memory.store.get_nodes(SESSION)
    page = open_page(browser, pages[SESSION])
    page.evaluate("window.__view.expandAll()")
    drawn = page.eval_on_selector_all("[data-node]",
                                      "els => els.map(e => [e.dataset.node, e.dataset.state])")
    want = {n.id: expected_state(n, memory.workspace_id) for n in nodes}
    assert len(drawn) == len(nodes) == len(want)
    assert dict(drawn) == want
    assert {"written", "pending", "tool", "runtime", "summary"} <= set(want.values())
    colours = page.evaluate("""() => {
        const css = getComputedStyle(document.documentElement), probe = document.createElement('i');
        document.body.appendChild(probe);
        const rgb = v => { probe.style.color = css.getPropertyValue('--' + v).trim();
                           return getComputedStyle(probe).color; };
        return [...document.querySelectorAll('[data-glyph]')].map(g => {
            const row = document.querySelector('[data-node="' + g.dataset.glyph + '"]');
            return [g.dataset.glyph, getComputedStyle(g).stroke, rgb(row.dataset.state)];
        });
    }""")
    assert len(colours) == len(nodes)
    for node_id, stroke, state_colour in colours:
        assert stroke == state_colour, node_id
    legend = page.eval_on_selector_all("[data-legend]", "els => els.map(e => e.textContent)")
    assert any(f"({sum(1 for s in want.values() if s == 'written')})" in t and "written" in t
               for t in legend)
    assert not page.errors
    page.close()


def test_the_head_and_every_live_tip_are_marked_and_forks_say_how_they_began(browser, pages,
                                                                            view_home):
    store = view_home["memory"].store
    page = open_page(browser, pages[SESSION])
    page.evaluate("window.__view.expandAll()")
    heads = page.eval_on_selector_all(".row:has(.pill.head)", "els => els.map(e => e.dataset.node)")
    tips = page.eval_on_selector_all(".row:has(.pill.tip)", "els => els.map(e => e.dataset.node)")
    assert heads == [store.head(SESSION)]
    assert sorted(tips) == sorted(r["tip"] for r in store.list_branches(SESSION))
    forks = dict(page.eval_on_selector_all(
        "[data-fork]", "els => els.map(e => [e.closest('.row').dataset.node, e.dataset.fork])"))
    want = {}
    for node in store.get_nodes(SESSION):
        md = node.metadata
        kind = ("edit" if md.get("edit_of") else "sub-agent" if md.get("spawn_branch_root")
                else "retry" if md.get("forked_from") else
                "summary" if "covers_ids" in md else None)
        if kind:
            want[node.id] = kind
    assert forks == want
    assert {"retry", "edit", "sub-agent"} <= set(forks.values())
    page.close()


def test_selecting_a_node_shows_its_text_and_the_topic_paragraphs_that_cite_it(browser, pages,
                                                                              view_home):
    memory = view_home["memory"]
    cited = citation_map(memory.workspace)[f"openprogram/{SESSION}/a4"]
    page = open_page(browser, pages[SESSION])
    page.click('[data-node="a4"]')
    assert selected_id(page) == "a4"
    text = memory.store.get_node(SESSION, "a4").output
    assert page.inner_text("#details .node-text") == text
    blocks = page.eval_on_selector_all("#details [data-block]", "els => els.map(e => e.dataset.block)")
    assert blocks == [block for _, block in cited] and blocks
    path, block = cited[0]
    page.click(f'#details [data-block="{block}"] a')
    assert page.is_visible("#topic")
    assert page.inner_text("#topic-heading") == path
    assert f"^{block}" in page.inner_text(f"#topic #block-{block}")
    page.click("#topic-close")
    assert not page.is_visible("#topic")
    page.close()


def test_a_pending_branch_says_why_it_is_pending(browser, pages, view_home):
    page = open_page(browser, pages[SESSION])
    page.click('.branch-list [data-tip="a2-retry"]')
    assert selected_id(page) == "a2-retry"
    why = page.inner_text('#details .why[data-reason="rejected_reply"]')
    assert "rejected reply" in why and "1 pending turn" in why
    page.click('.branch-list [data-tip="late-q"]')
    assert "below the threshold" in page.inner_text('#details .why[data-reason="below_threshold"]')
    page.close()

    page = open_page(browser, pages[FAILED])
    why = page.inner_text('#details .why[data-reason="failed_write"]')
    assert "WRITER_PRECONDITION_FAILED" in why and "topic template is missing" in why
    page.click('[data-node="d1"]')  # a pending turn of that branch shows the same reason
    assert page.query_selector('#details .why[data-reason="failed_write"]')
    page.close()


def test_the_arrow_keys_walk_along_a_branch_at_laptop_size(browser, pages, view_home):
    store = view_home["memory"].store
    page = open_page(browser, pages[SESSION], LAPTOP)
    head = store.head(SESSION)
    assert selected_id(page) == head
    page.focus("#graph")
    page.keyboard.press("ArrowUp")
    assert selected_id(page) == store.get_node(SESSION, head).predecessor
    page.keyboard.press("Home")
    assert selected_id(page) == "u1"
    assert page.is_visible('[data-node="u1"]')  # scrolled into the drawn window
    outline = page.eval_on_selector('[data-node="u1"]', "e => getComputedStyle(e).outlineStyle")
    assert outline != "none"  # focus is visible
    for want in ("a1", "u2", "a2"):
        page.keyboard.press("ArrowDown")
        assert selected_id(page) == want
    page.keyboard.press("ArrowRight")
    assert selected_id(page) == "a2-retry"
    page.keyboard.press("ArrowLeft")
    assert selected_id(page) == "a2"
    page.keyboard.press("End")
    assert selected_id(page) == head
    page.keyboard.press("Home")
    page.keyboard.press("h")
    assert selected_id(page) == head
    assert page.is_visible(f'[data-node="{head}"]')
    page.close()


def test_the_search_box_finds_every_turn_with_the_text_and_jumps_to_each(browser, pages,
                                                                        view_home):
    store = view_home["memory"].store
    want = [n.id for n in store.get_nodes(SESSION) if "vegetarian" in n.text().lower()]
    page = open_page(browser, pages[SESSION], LAPTOP)
    page.get_by_label("Search turns").fill("Vegetarian")
    page.wait_for_function("n => document.getElementById('qcount').textContent === n + ' matches'", arg=len(want))
    visited = []
    for _ in want:
        page.keyboard.press("Enter")
        visited.append(selected_id(page))
    assert visited == want
    # a match inside the collapsed run: the run opens and the turn is selected
    page.get_by_label("Search turns").fill("agenda item 7:")
    page.keyboard.press("Enter")
    picked = selected_id(page)
    assert store.get_node(SESSION, picked).text().startswith("Agenda item 7:")
    assert page.is_visible(f'[data-node="{picked}"]')
    page.close()


def test_a_long_linear_run_collapses_into_one_segment_that_expands(browser, pages, view_home):
    page = open_page(browser, pages[SESSION])
    total = len(view_home["memory"].store.get_nodes(SESSION))
    segment = page.inner_text("[data-segment]")
    hidden = int(segment.split()[1])
    assert "turns collapsed" in segment and hidden >= LONG_RUN - 4
    assert page.eval_on_selector_all("[data-node]", "els => els.length") == total - hidden
    page.focus("#graph")
    page.click("[data-segment]")
    assert page.query_selector("[data-segment]") is None
    assert page.eval_on_selector_all("[data-node]", "els => els.length") == total
    page.close()


def test_the_page_fetches_nothing_and_names_every_control(browser, pages):
    page = browser.new_page(viewport=LAPTOP)
    requests: list[str] = []
    page.on("request", lambda req: requests.append(req.url))
    page.goto(pages[SESSION].as_uri())
    page.wait_for_selector('body[data-ready="1"]', timeout=10_000)
    assert requests == [pages[SESSION].as_uri()]
    assert page.eval_on_selector_all("script[src], link[href], img[src]", "els => els.length") == 0
    assert page.get_attribute("#graph", "role") == "tree"
    assert page.get_attribute("#graph", "aria-label")
    labels = page.eval_on_selector_all(".row", "els => els.map(e => [e.getAttribute('role'), "
                                               "e.getAttribute('aria-label')])")
    assert labels and all(role == "treeitem" and label for role, label in labels)
    assert page.get_by_label("Search turns").count() == 1
    active = page.get_attribute("#graph", "aria-activedescendant")
    assert page.query_selector(f"#{active}") is not None
    page.close()


def test_a_screenshot_at_laptop_size_fits_the_screen(browser, pages):
    page = open_page(browser, pages[SESSION], LAPTOP)
    page.click('[data-node="a4"]')
    overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
    assert overflow <= 0
    SHOTS.mkdir(parents=True, exist_ok=True)
    shot = SHOTS / "view-branching-session.png"
    page.screenshot(path=str(shot))
    assert shot.stat().st_size > 10_000
    page.close()


def test_a_long_session_keeps_only_the_rows_in_view_in_the_page(browser, tmp_path):
    from scriptorium.memory.writing import Memory
    from viewkit import long_session

    home = tmp_path / "home"
    sid = long_session(home, 1500, fork_every=50)
    memory = Memory(home)
    total = len(memory.store.get_nodes(sid))
    path = Path(write_page(memory, sid, tmp_path / "long.html")["path"])
    page = open_page(browser, path, LAPTOP)
    layout = page.evaluate("window.__view.layout()")
    assert layout["segments"] >= 25 and layout["rows"] < total / 5  # runs collapsed
    in_dom = page.eval_on_selector_all(".row", "els => els.length")
    assert 0 < in_dom <= 768 // 28 + 2 * 12 + 2  # the window plus overscan, not the session
    page.evaluate("window.__view.expandAll()")
    assert page.evaluate("window.__view.layout()")["rows"] == total
    assert page.eval_on_selector_all(".row", "els => els.length") <= 768 // 28 + 2 * 12 + 2
    page.focus("#graph")
    page.keyboard.press("Home")
    page.keyboard.press("h")
    assert page.is_visible('.row.selected') and selected_id(page) == memory.store.head(sid)
    assert not page.errors
    page.close()
