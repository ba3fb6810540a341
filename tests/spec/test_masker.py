"""The one masker: every secret value is hidden in shipway's own output, short ones too."""

from __future__ import annotations

import pytest

from shipway.spec.secrets import MASK, HashedValue, Masker, Secret, redact


@pytest.mark.parametrize(
    ("values", "text", "expected"),
    [
        (["s3cr3t-value"], "token=s3cr3t-value; again s3cr3t-value", "token=***; again ***"),
        (["abcd"], "xxabcdxx", "xx***xx"),  # 4+ characters: masked inside words too
        (["abc"], "pw=abc", "pw=***"),  # a 3-character value, standing alone
        (["abc"], '{"pw": "abc"}', '{"pw": "***"}'),
        (["abc"], "abc at the start", "*** at the start"),
        (["abc"], "abcdef and xabc stay", "abcdef and xabc stay"),  # inside a word: not it
        (["7"], "exit code 7, port 8077", "exit code ***, port 8077"),
        (["", "a"], "a cat", "*** cat"),  # an empty value masks nothing
        (["pass", "password1"], "password1 pass", "*** ***"),  # the longer one whole
        ([], "nothing to hide", "nothing to hide"),
    ],
)
def test_every_secret_value_is_masked(values: list[str], text: str, expected: str) -> None:
    assert Masker(values)(text) == expected


def test_masker_takes_secrets_and_redact_uses_it() -> None:
    secrets = {"A": Secret("xyz"), "B": Secret("long-value")}
    assert Masker.of(secrets)("xyz long-value") == f"{MASK} {MASK}"
    assert redact("a=xyz b=long-value", secrets) == f"a={MASK} b={MASK}"
    assert not Masker([]) and Masker(["x"])


def test_regex_characters_in_values_are_literal() -> None:
    assert Masker(["a.c"])("abc a.c") == f"abc {MASK}"
    assert Masker(["(x)+"])("y(x)+y") == f"y{MASK}y"


def test_values_known_only_by_their_salted_digest_are_masked_by_the_same_rule() -> None:
    salt = "5a1t"
    kept = [HashedValue.of("hunter22", salt), HashedValue.of("q7z", salt)]
    mask = Masker(hashed=kept, salt=salt)
    assert mask("pw=hunter22; xhunter22y") == "pw=***; x***y"  # long: anywhere
    assert mask("token q7z, q7zq7z") == "token ***, q7zq7z"  # short: as a token only
    assert "hunter22" not in repr(HashedValue.of("hunter22", salt))
    other = Masker(hashed=[HashedValue.of("hunter22", "another salt")], salt=salt)
    assert other("pw=hunter22") == "pw=hunter22"  # a digest means nothing under another salt
