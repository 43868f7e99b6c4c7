"""A demo dir holding files the demo did not write names the first three of them and
counts the rest, in `first_of`'s one spelling (`(+N more)`)."""

from __future__ import annotations

from cli import demo_record


def test_many_files_the_demo_did_not_write_are_three_named_then_counted(tmp_path):
    out = tmp_path / "demo"
    (out / "gsm8k_format").mkdir(parents=True)
    (out / "gsm8k_format" / "train.jsonl").write_text("written by the demo")
    demo_record.start(out)
    demo_record.record(out)
    for index in range(5):
        (out / f"mine{index}.txt").write_text("not the demo's")
    said = str(demo_record.refusal(out))
    assert f"{out}: a previous demo's output that also holds" in said
    assert " holds mine0.txt, mine1.txt, mine2.txt (+2 more), which the demo did not" in said
