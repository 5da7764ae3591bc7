"""Checks a `specd ab --report` page against the run's --json output: the page parses as HTML5
without a single parse error (html5lib in strict mode), every chart is an inline SVG, the verdict
and per-prompt figures are the run's, prompts appear as text (markup escaped), and each prompt
that diverged shows its divergence in context while identical ones do not."""
import json
import sys

import html5lib

SVG = "{http://www.w3.org/2000/svg}svg"


def text(el):
    return "".join(el.itertext())


def main(report_path, json_path, prompts_path, expect_divergence):
    with open(report_path, "rb") as f:
        raw = f.read()
    parser = html5lib.HTMLParser(strict=True, namespaceHTMLElements=False)
    doc = parser.parse(raw)  # raises ParseError on the first HTML parse error
    run = json.load(open(json_path))
    prompts = [line.rstrip("\r\n") for line in open(prompts_path, "rb").read().decode("utf-8", "replace").split("\n")]
    prompts = [p for p in prompts if p]

    charts = doc.findall(".//section[@id='charts']//" + SVG)
    drafted = len(run["overall"]["acceptance_by_position"]) > 0
    assert len(charts) == (3 if drafted else 2), f"{len(charts)} charts"
    for svg in charts:
        bars = svg.findall("{http://www.w3.org/2000/svg}rect")
        assert bars or svg.findall("{http://www.w3.org/2000/svg}text"), "empty chart"

    setup = text(doc.find(".//section[@id='setup']"))
    assert run["policy"] in setup and str(run["seed"]) in setup, "setup lacks policy or seed"

    n = len(run["prompts"])
    same = sum(p["identical"] for p in run["prompts"])
    verdict = text(doc.find(".//section[@id='verdict']"))
    assert f"{same} of {n} prompts" in verdict, verdict

    rows = doc.findall(".//section[@id='prompts']/table//tr")[1:]
    assert len(rows) == n, f"{len(rows)} rows for {n} prompts"
    divergences = 0
    for i, (row, p) in enumerate(zip(rows, run["prompts"])):
        cells = [text(td) for td in row.findall("td")]
        assert cells[2] == ("yes" if p["identical"] else "no"), (i, cells)
        assert cells[8] == f"{p['speedup']:.2f}x", (i, cells[8], p["speedup"])
        assert cells[5] == f"{p['tpf']:.2f}", (i, cells[5], p["tpf"])
        heading = doc.find(f".//h3[@id='prompt-{i + 1}']")
        shown = text(heading).split(" ", 1)[1]
        assert shown == prompts[i].replace("\x01", "\ufffd"), (shown, prompts[i])
        block = []
        el_iter = iter(doc.find(".//section[@id='prompts']"))
        started = False
        for el in el_iter:
            if el is heading:
                started = True
                continue
            if started and el.tag == "h3":
                break
            if started:
                block.append(el)
        marks = [m for el in block for m in el.iter("mark")]
        if p["identical"]:
            assert not marks, f"prompt {i + 1} identical but shows a divergence"
        else:
            divergences += 1
            kinds = sorted(m.get("class") for m in marks)
            assert kinds == ["plain", "spec"], (i, kinds)
            assert f"output token {p['first_difference']}" in "".join(text(el) for el in block)
    if expect_divergence:
        assert divergences > 0, "expected at least one diverging prompt in this run"
    print(f"report ok: {n} prompts, {len(charts)} charts, {divergences} divergences shown")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4] == "1")
