"""Messages are cut to one length by one rule (`cut_to`), printed or not: `printable`
escapes what a terminal would act on and cuts by it, and --json output (whose escaping
json.dumps does) cuts by it alone, so a 1 MiB tensor name is the same ~2,000 characters
in both outputs of one command."""

from __future__ import annotations

from mfsdp_ckpt.check.printable import MAX_PRINTED_CHARS, cut_to, printable


def test_a_long_message_is_cut_the_same_way_printed_or_not():
    name = "model." + "a" * (1 << 20) + ".weight"
    cut = cut_to(name)
    assert cut == printable(name)
    assert cut.startswith("model.aaa") and cut.endswith("aaa.weight")
    assert f"…(+{len(name) - MAX_PRINTED_CHARS} chars)…" in cut
    assert len(cut) < MAX_PRINTED_CHARS + 40


def test_a_short_message_is_left_whole_and_unescaped():
    text = "model.embed\x1b[2J"
    assert cut_to(text) == text
    assert printable(text) == "model.embed\\x1b[2J"
