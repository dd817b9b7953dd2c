"""The committed reports are products: every record has its HTML page, rendered from that very record; every link in
the index and the pages resolves to a file; no page shows `NaN`, a raw Python dict, or fetches anything from the
network."""

import html
import re
from pathlib import Path

import pytest

from moe_bench.core import read_json
from moe_bench.report_pages import page_stamp, record_page

from conftest import REPO

ROOT = REPO / "reports"
RECORDS = sorted(ROOT.glob("*/*.json"))
PAGES = sorted(ROOT.glob("*/*.html")) + [ROOT / "index.html"]
HREF = re.compile(r"""href=["']([^"'#?]+)""")
REMOTE = re.compile(r"""<(script|link|img|iframe)[^>]+(src|href)=["'](https?:)?//""")
RAW_DICT = re.compile(r"\{('|&#x27;|&#39;)[^'&]*('|&#x27;|&#39;): ")  # a dict's repr: {'stage': ...


def broken_links(page: Path) -> list[str]:
    "Relative links of a page that name no file."
    return [
        h for h in HREF.findall(page.read_text()) if "://" not in h and not (page.parent / html.unescape(h)).is_file()
    ]


def visible_text(page: Path) -> str:
    "A page without its inline images (base64 can spell anything)."
    return re.sub(r"data:[^\"']*", "", page.read_text())


def test_there_are_reports():
    assert len(RECORDS) > 200 and len(PAGES) > len(RECORDS)


def test_every_record_has_its_page():
    stale = [
        str(p.relative_to(ROOT))
        for p in RECORDS
        if not p.with_suffix(".html").exists() or page_stamp(p.with_suffix(".html")) != read_json(p).get("time_utc")
    ]
    assert stale == [], f"pages missing or from another record (run write_docs): {stale[:10]}"


def test_every_link_in_the_index_resolves():
    links = HREF.findall((ROOT / "index.html").read_text())
    assert len(links) > 2 * len({p.parent for p in RECORDS})  # a page and a record per phase, per model
    assert broken_links(ROOT / "index.html") == []


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_page_is_clean(page):
    text = visible_text(page)
    assert broken_links(page) == []
    assert "NaN" not in text
    assert not RAW_DICT.search(text), RAW_DICT.search(text).group(0)
    assert not REMOTE.search(text)


def test_the_checks_see_what_they_look_for(tmp_path):
    "Controls: a broken link, a NaN, a dict's repr and a CDN script are each caught."
    page = tmp_path / "p.html"
    page.write_text(
        "<a href='gone.html'>x</a><td>NaN</td><p>{'stage': 'router_logits'}</p><script src='https://cdn.x/y.js'>"
    )
    assert broken_links(page) == ["gone.html"]
    text = visible_text(page)
    assert "NaN" in text and RAW_DICT.search(text) and REMOTE.search(text)
    assert RAW_DICT.search(html.escape("{'stage': 'router_logits'}"))


@pytest.mark.parametrize("model", ["qwen3_moe", "deepseek_v3", "gpt_oss", "llama4"])
def test_record_pages_match_a_fresh_rendering(model):
    "The committed record pages are what the renderer makes of the committed records (a notebook report is kept as it is)."
    folder = ROOT / model
    siblings = [p.stem for p in sorted(folder.glob("*.json"))]
    pages = [p for p in sorted(folder.glob("*.html")) if "content='moe_bench.report_pages'" in p.read_text()[:2000]]
    assert pages
    for page in pages:
        assert page.read_text() == record_page(read_json(page.with_suffix(".json")), siblings), page.name
