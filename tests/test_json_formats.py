"""Specification of ``gxg.grammar.json_formats``: JSON Schema ``format`` names as regexes.

The reference is jsonschema's format checker with all its extras installed
(``Draft202012Validator.FORMAT_CHECKER``). Each table row is a value and one of

* ``V``: the checker accepts it and so does the format's pattern;
* ``I``: the checker rejects it and so does the pattern;
* ``X``: the checker accepts it but the pattern leaves it out on purpose (listed in the module
  docstring of ``gxg/grammar/json_formats.py``). Never the other way round: a pattern must not
  accept what the checker rejects.

Every row is checked against the checker itself (so the table is verified), against Python's
``re.fullmatch`` and against gxg's grammar for the pattern (``regex_to_grammar`` + the reference
recognizer); the patterns use only syntax on which Python's ``re`` and ECMAScript agree.

The properties generate strings from each pattern with hypothesis and require the checker to
accept all of them (exactness). Hypothesis enumerates every member of a character class, which
takes seconds for classes of a million code points, and its strings for nested ``*`` grow
long, so the strings are generated from a sub-language of the pattern: wide ranges in classes
shrink to their ends and middle, and ``*`` / ``+`` become ``{0,4}`` / ``{1,4}``. Each such
string is also checked against the full pattern.
"""
from __future__ import annotations

import functools
import itertools
import re
import unicodedata

import idna
import pytest
import rfc3987
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from gxg.grammar.json_formats import FORMAT_PATTERNS, format_pattern
from gxg.grammar.regex import regex_to_grammar
from gxg.testing import Recognizer

CHECKER = Draft202012Validator.FORMAT_CHECKER

V, I, X = "valid", "invalid", "excluded"


def rows(label, *values):
    return [(value, label) for value in values]


# Longest hostnames of the pattern's shape: first label 63, then 6 labels of 30 (249 in all).
LONG_HOSTNAME = "a" * 63 + ("." + "b" * 30) * 6
# 253 characters, within the checker's limit but not of the pattern's shape.
HOSTNAME_253 = ("a" * 63 + ".") * 3 + "a" * 61

TABLES = {
    "date": rows(V, "2020-02-29", "2000-02-29", "2024-02-29", "2400-02-29", "0004-02-29",
                 "2023-02-28", "1900-02-28", "0001-01-01", "9999-12-31", "2023-01-31",
                 "2023-03-31", "2023-04-30", "2022-11-30", "2023-12-31", "2023-07-31",
                 "2023-08-31", "2023-10-31", "2023-06-30", "2023-09-30")
    + rows(I, "1900-02-29", "2100-02-29", "2023-02-29", "2020-02-30", "2023-04-31",
           "2023-06-31", "2023-09-31", "2023-11-31", "2020-01-32", "2020-13-01", "2020-00-10",
           "2020-01-00", "0000-01-01", "0000-02-29", "2020-1-01", "20200101", "2020/01/01",
           "2020-01-01T00:00:00Z", "", " 2020-01-01", "2020-01-01\n", "٢٠٢٠-01-01",
           "99999-01-01"),
    "time": rows(V, "00:00:00Z", "23:59:59Z", "12:00:00z", "12:00:00.5-01:00",
                 "12:00:00.123456789+05:30", "08:30:00+23:59", "08:30:00-00:00",
                 "23:59:59.999Z", "01:02:03+14:00", "10:00:00.0Z", "19:59:59-23:00")
    + rows(I, "24:00:00Z", "23:59:60Z", "12:00:00", "12:00Z", "12:60:00Z", "12:00:60Z",
           "12:00:00+24:00", "12:00:00+0530", "12:00:00.Z", "12:00:00 Z", "1:00:00Z",
           "12:00:00+05:60", "T12:00:00Z", "12:00:00Z ", "")
    + rows(X, "12:00:00Z\n"),
    "date-time": rows(V, "2022-01-01T12:00:00Z", "2022-01-01T12:00:00.123+05:30",
                      "2022-01-01t12:00:00z", "2020-02-29T23:59:59Z",
                      "2000-02-29T00:00:00-08:00", "1985-04-12T23:20:50.52Z",
                      "1996-12-19T16:39:57-08:00", "0001-01-01T00:00:00Z",
                      "9999-12-31T23:59:59.999999Z", "2024-02-29T10:00:00+01:00")
    + rows(I, "2022-01-01 12:00:00Z", "2022-01-01T23:59:60Z", "1990-12-31T15:59:60-08:00",
           "1900-02-29T00:00:00Z", "2022-01-01T12:00:00", "2022-01-01T12:00Z",
           "2022-01-01T12:00:00+0530", "2022-01-01T24:00:00Z", "0000-01-01T00:00:00Z",
           "2022-02-30T00:00:00Z", "2022-01-01", "2022-01-01T12:00:00.Z",
           "2022-01-01T12:00:00+24:00", "2022-01-01_12:00:00Z")
    + rows(X, "2022-01-01T12:00:00Z\n"),
    "duration": rows(V, "P1D", "PT1H", "P1W", "P1Y2M3DT4H5M6S", "PT0.5S", "PT0,5S", "-P1D",
                     "+P1D", "P3Y6M4DT12H30M5S", "PT36H", "P1M", "PT1M", "P0D",
                     "P1DT1H1M1.5S", "P2Y", "P1Y1D", "PT1H1S", "P1.5Y")
    + rows(I, "P", "PT", "P1DT", "P1Y1W", "PT1D", "P1M1Y", "PT1H2", "P1", "p1d", "1D",
           "P1D\n", "PT1S1M", "P1H", "", "P 1D", "P0003-06-04T12:30:05", "P1D1D", "PW")
    + rows(X, "P-1D", "P1e3D", "P.5D", "P5.D", "P0Y1W", "P1WT1H"),
    "email": rows(V, "a@b", "user.name+tag@example.co.uk", "joe.bloggs@example.com",
                  "te~st@example.com", "~test@example.com", "test~@example.com",
                  '"joe bloggs"@example.com', '"joe..bloggs"@example.com',
                  '"a\\"b"@example.com', "joe.bloggs@[127.0.0.1]", "x@localhost",
                  "1234567890@example.com", "a!#$%&'*+/=?^_`{|}~-@example.org",
                  "first.last@sub-domain.example")
    + rows(I, "invalid-email", "", "2962", "example.com", "user(at)example.com", "a.b.c",
           "no at sign", "joe.bloggs", '"quoted"', "[127.0.0.1]", "user%example.com",
           "a\uff20b")
    + rows(X, "@", ".test@example.com", "test.@example.com", "te..st@example.com",
           "joe.bloggs@[IPv6:::1]", "a b@c", "a@b@c", "a@-b.com", "user@", "@example.com",
           "日本@example.com", "a@b.", "joe.bloggs@[127.0.0.300]"),
    "idn-email": rows(V, "실례@실례.테스트", "用户@例子.广告", "Pelé@example.com",
                      "δοκιμή@παράδειγμα.δοκιμή", "我買@屋企.香港", "user.name+tag@example.co.uk",
                      "a@b", '"joe bloggs"@example.com', "joe@[127.0.0.1]",
                      "медведь@с-балалайкой.рф", "x@😀.com")
    + rows(I, "2962", "", "실례", "no-at-sign", "日本語", "example.com", "a.b",
           "user\uff20example.com", " ", "[1.2.3.4]")
    + rows(X, "@", "a b@c", ".a@b", "a@", "@b", "a@b@c", "a..b@c", "\x80@b"),
    "hostname": rows(V, "example.com", "example.com.", "a", "xn--bcher-kva.com", "ab--cd",
                     "1.2.3.4", "www.example.com", "a" * 63 + ".com", "my-host",
                     "A-B.C-D.EXAMPLE", "s3.us-west-2.amazonaws.com", "a.b.c.d.e.f.g",
                     LONG_HOSTNAME, LONG_HOSTNAME + ".", "0", "123")
    + rows(I, "-a.com", "a-.com", "a_b.com", "", ".", "a..b", "é.com", "a" * 64,
           "example.com..", ".example.com", "exa mple.com", "a" * 64 + ".com", "host:80",
           "*.example.com", HOSTNAME_253 + "a", "a.-b", "a.b-")
    + rows(X, "١٢.com", "example.com\n", "a.b.c.d.e.f.g.h", "example." + "a" * 31 + ".com",
           HOSTNAME_253, HOSTNAME_253 + "."),
    "idn-hostname": rows(V, "münchen.de", "bücher.DE", "例え.テスト", "실례.테스트",
                         "EXAMPLE.COM", "a.", "example.com", "пример.рф", "δοκιμή.gr",
                         "日本語.jp", "straße.de", "a" * 63, "испытание.рф", "ăâđ.vn",
                         "1.2.3.4", "ab-cd.com", "a.b.c.d.e", "ab-c", "aa-b",
                         "a" * 63 + ("." + "b" * 46) * 4)
    + rows(I, "Bücher.de", "ÄÖÜ.de", "ab--cd", "a_b", "-a", "a-", "", "a..b", "xn--",
           "a" * 64, "a b", "\u0300a", "a\u200db", "a-b-", "xn---")
    + rows(X, "xn--bcher-kva.com", "例え。テスト", "münchen-straße.de", "www.испытание.рф",
           "ơ.vn", "שלום.com", "a.b.c.d.e.f", "a" * 63 + ("." + "b" * 47) * 3),
    "ipv4": rows(V, "0.0.0.0", "255.255.255.255", "192.168.1.1", "127.0.0.1", "10.0.0.255",
                 "1.2.3.4", "8.8.8.8", "100.64.0.0", "249.250.251.252", "199.99.9.0")
    + rows(I, "256.1.1.1", "01.1.1.1", "1.1.1", "1.1.1.1\n", " 1.1.1.1", "1.1.1.01",
           "127.0.0.1/32", "١.1.1.1", "1.1.1.1.1", "", "1..1.1", "a.b.c.d", "0x7f.0.0.1",
           "1.2.3.4 ", "1.2.3.00", "300.1.1.1"),
    "ipv6": rows(V, "::", "::1", "1::", "1:2:3:4:5:6:7:8", "1:2:3:4:5:6:7::",
                 "::2:3:4:5:6:7:8", "1::3:4:5:6:7:8", "::ffff:1.2.3.4", "1:2:3:4:5:6:1.2.3.4",
                 "::1.2.3.4", "1:2:3:4:5::1.2.3.4", "2001:db8::ff00:42:8329",
                 "FE80::0202:B3FF:FE1E:8329", "0000:0000::", "1::2:3",
                 "2001:0db8:85a3:0000:0000:8a2e:0370:7334", "fe80::1", "1:2::3:1.2.3.4")
    + rows(I, "1:2:3:4:5:6:7:8:9", "1:2:3:4:5:6:7:1.2.3.4", "fe80::1%eth0", "12345::",
           "1:::2", ":1::2", "1::2::3", "::FFFF:01.2.3.4", "1:2:3:4:5:6::1.2.3.4", "::1\n", "",
           ":", "1:2:3:4:5:6:7", "::g", "1.2.3.4", "1::2:", "[::1]", "::256.1.1.1"),
    "uri": rows(V, "https://example.com/a/b?x=1#frag", "mailto:a@b.c", "urn:isbn:0451450523",
                "http://[::1]:80/", "a:", "http://ex.com/%C3%A9", "http://[v1.x]/",
                "http://1.2.3.4:/", "HTTP://A", "file:///etc/passwd",
                "ftp://user:pass@host:21/path;type=a", "tel:+1-816-555-1212",
                "news:comp.infosystems.www.servers.unix",
                "ldap://[2001:db8::7]/c=GB?objectClass?one", "http://[::01.2.3.4]/",
                "foo+bar.baz-1:x", "http://a/b/c/../d", "x://?#", "a:/", "a://")
    + rows(I, "not-a-uri", "http://a b", "http://%zz", "http://é.com", "//example.com",
           "1a:b", ":a", "", "/a/b", "http://ex.com/a b", "http://[::1", "http://[1.2.3.4]/",
           "http://ex.com/#a#b", "http://ex.com/<>", "\\\\server\\share", "http://x/%")
    + rows(X, "http://example.com/\n"),
    "uri-reference": rows(V, "", "/a", "a/b", "a:b", "#f", "?q", "//h", "../x", "%41",
                          "https://example.com/a?b#c", "./a:b", "//[::1]:8080/p", "a/b:c", "#",
                          "//", "///")
    + rows(I, ":a", "a b", "http://a b", "%", "%zz", "a:b:c d", "#a#b", "\\a", 'a"b', "é",
           "<a>", "[x]", "a/b c", "1a:b")
    + rows(X, "a\n"),
    "iri": rows(V, "http://é.com/ü?q=ñ#f", "https://例え.テスト/パス", "http://ex.com/?q=\ue000",
                "urn:ietf:rfc:3987", "mailto:user@例え.jp", "https://example.com",
                "http://[::1]/", "x:y", "http://ü.de:8080/a/b", "http://a/😀")
    + rows(I, "http://a b", "/relative", "例え", "http://ex.com/#\ue000", "http://ex.com/\ue000",
           "", ":x", "http://%g0", "é:x", "http://a/\x80", "http://a/\ufffe")
    + rows(X, "http://x\n"),
    "iri-reference": rows(V, "", "/ü", "例え/パス", "#ü", "?ä=ö", "http://é.com", "//例え.jp/x",
                          "../ü", "a:b", "./ü:x", "?\ue000")
    + rows(I, "a b", ":x", "ü:x", "\x80", "%g", "#a#b", "a<b", "\\", "http://a b", 'a"b',
           "#\ue000")
    + rows(X, "a\n"),
    "uri-template": rows(V, "http://example.com/{id}", "{+path}", "{?q,r}", "{#x}", "{a:3}",
                         "{a*}", "{.a.b}", "/users/{user_id}/posts{?page,per_page}",
                         "http://example.com/~{username}/", "{/path*}", "{;x,y}", "{&z}", "",
                         "plain", "%20{x}", "{a:999}", "{a.b,c:1,d*}", "ü{x}")
    + rows(I, "{=x}", "{a:1000}", "{a:0}", "{}", "{a", "a}", "{%20a}", "{!x}", "{a b}",
           "{a,,b}", "{@x}", "{|x}", "{a:}", "}{", "{{a}}")
    + rows(X, "a b", "{a..b}", "{a%20}", "{a,}", "%", "{a:01}", "<x>", "{,a}", "{a/b}",
           "{a[]}", "{a=b}"),
    "uuid": rows(V, "123e4567-e89b-12d3-a456-426655440000", "123E4567-E89B-12D3-A456-426655440000",
                 "00000000-0000-0000-0000-000000000000", "ffffffff-ffff-ffff-ffff-ffffffffffff",
                 "FFFFFFFF-FFFF-FFFF-FFFF-FFFFFFFFFFFF", "550e8400-e29b-41d4-a716-446655440000",
                 "6ba7b810-9dad-11d1-80b4-00c04fd430c8", "aBcDeF01-2345-6789-abcd-ef0123456789",
                 "f81d4fae-7dec-11d0-a765-00a0c91e6bf6", "01234567-89ab-cdef-0123-456789abcdef")
    + rows(I, "123e4567e89b12d3a456426655440000", "{123e4567-e89b-12d3-a456-426655440000}",
           "123e4567-e89b-12d3-a456-42665544000", "123e4567-e89b-12d3-a456-4266554400000",
           "urn:uuid:123e4567-e89b-12d3-a456-426655440000", "g23e4567-e89b-12d3-a456-426655440000",
           "123e4567-e89b-12d3-a456_426655440000", "", "123e4567-e89b-12d3a-456-426655440000",
           " 123e4567-e89b-12d3-a456-426655440000", "123e4567-e89b-12d3-a456-426655440000\n")
    + rows(X, "123e4567-e89b-12d3-a456-4266-5544-0000", "123e4567-e89b-12d3-a456-426655440000}",
           "123e4567-e89b-12d3-a456-4266_5544000"),
    "json-pointer": rows(V, "", "/", "/a", "/a/b", "/~0~1", "//", "/a\n", "/foo/0", "/ ",
                         "/é/😀", "/a~1b", "/~01")
    + rows(I, "a", "/a~", "/a~2", "#/a", "~0", "/~", "/~a", " /a", "a/b", "/~/", "#"),
    "relative-json-pointer": rows(V, "0", "1", "10", "0#", "1/a", "20", "0/", "2/foo/0", "9#",
                                  "120", "0/~0", "5/a~1b/")
    + rows(I, "100", "105", "01", "0/a~", "", "#", "1#/a", "-1/a", "+1", "/a", "a", "0##",
           "1 ")
    + rows(X, "\u0663", "1\u0663"),
}


@functools.lru_cache(maxsize=None)
def recognizer(name: str) -> Recognizer:
    return Recognizer(regex_to_grammar(FORMAT_PATTERNS[name]))


def pattern_accepts(name: str, value: str) -> bool:
    """The format's pattern matches ``value`` in full — by Python's ``re`` and by gxg's grammar,
    which must agree."""
    by_python = re.fullmatch(FORMAT_PATTERNS[name], value) is not None
    by_gxg = recognizer(name).accepts(value)
    assert by_python == by_gxg, f"re says {by_python}, gxg says {by_gxg} for {value!r}"
    return by_python


TABLE_ROWS = [(name, value, label) for name, table in TABLES.items() for value, label in table]


@pytest.mark.parametrize("name,value,label", TABLE_ROWS,
                         ids=[f"{n}:{v!r}"[:60] for n, v, _ in TABLE_ROWS])
def test_table(name, value, label):
    assert CHECKER.conforms(value, name) == (label != I), "the table disagrees with the checker"
    assert pattern_accepts(name, value) == (label == V)


@pytest.mark.parametrize("name", sorted(TABLES))
def test_tables_have_enough_rows(name):
    labels = [label for _, label in TABLES[name]]
    assert labels.count(V) >= 10 and labels.count(I) >= 10


def test_the_formats_are_the_checkers():
    # Every format the checker knows has a pattern, except 'regex' (not a regular language).
    assert set(FORMAT_PATTERNS) == set(CHECKER.checkers) - {"regex"}
    assert set(TABLES) == set(FORMAT_PATTERNS)


@pytest.mark.parametrize("name", ["regex", "datetime", "ip-address", "host-name", "color",
                                  "int32", "binary", "", "DATE", "uri "])
def test_unknown_formats_have_no_pattern(name):
    assert format_pattern(name) is None


@pytest.mark.parametrize("name", sorted(FORMAT_PATTERNS))
def test_pattern_compiles_with_gxg(name):
    assert format_pattern(name) == FORMAT_PATTERNS[name]
    grammar = regex_to_grammar(FORMAT_PATTERNS[name])
    assert not Recognizer(grammar).language_is_empty


# ------------------------------------------------------------------------------ properties

def generation_pattern(pattern: str, max_repeat: int = 4, max_span: int = 256) -> str:
    """A sub-language of ``pattern`` that hypothesis generates from quickly: each range in a
    class wider than ``max_span`` keeps only its ends and middle (not in a negated class, where
    that would add code points), ``*`` is ``{0,max_repeat}`` and ``+`` is ``{1,max_repeat}``.
    Relies on the patterns' plain syntax (no ``{`` quantifier follows ``*``/``+``, ranges in
    classes are literal characters or escapes)."""
    out = []
    i, in_class, negated = 0, False, False
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\":
            out.append(pattern[i:i + 2])
            i += 2
        elif in_class:
            if ch == "]":
                in_class = False
                out.append(ch)
                i += 1
            elif i + 2 < len(pattern) and pattern[i + 1] == "-" and pattern[i + 2] not in "]\\":
                lo, hi = ord(ch), ord(pattern[i + 2])
                out.append(ch + chr((lo + hi) // 2) + pattern[i + 2]
                           if hi - lo > max_span and not negated else pattern[i:i + 3])
                i += 3
            else:
                out.append(ch)
                i += 1
        elif ch == "[":
            in_class = True
            out.append(ch)
            i += 1
            negated = pattern[i] == "^"
            if negated:                     # keep the negation mark out of the range logic
                out.append("^")
                i += 1
        elif ch in "*+":
            out.append(f"{{{0 if ch == '*' else 1},{max_repeat}}}")
            i += 1
        else:
            out.append(ch)
            i += 1
    return "".join(out)


@functools.lru_cache(maxsize=None)
def generated_strings(name: str):
    return st.from_regex(generation_pattern(FORMAT_PATTERNS[name]), fullmatch=True)


PROPERTY_SETTINGS = settings(
    max_examples=200, deadline=None, database=None, phases=[Phase.generate, Phase.shrink],
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                           HealthCheck.filter_too_much],
)


@pytest.mark.parametrize("name", sorted(FORMAT_PATTERNS))
@PROPERTY_SETTINGS
@given(data=st.data())
def test_what_a_pattern_matches_the_checker_accepts(name, data):
    value = data.draw(generated_strings(name))
    assert re.fullmatch(FORMAT_PATTERNS[name], value)
    assert CHECKER.conforms(value, name), f"{name}: the pattern lets through {value!r}"
    assert recognizer(name).accepts(value)


# Completeness where the module docstring says nothing is left out: strings of the checker's
# own regular language (rfc3987's and rfc3339-validator's regexes, filtered by the checker where
# it adds more conditions) are matched by the pattern.
CHECKER_LANGUAGES = {
    "uri": rfc3987.upatterns_no_names["URI"],
    "uri-reference": rfc3987.upatterns_no_names["URI_reference"],
    "iri": rfc3987.upatterns_no_names["IRI"],
    "iri-reference": rfc3987.upatterns_no_names["IRI_reference"],
    "ipv6": rfc3987.upatterns_no_names["IPv6address"],
    "date-time": r"^[0-9]{4}-(0[1-9]|1[0-2])-[0-9]{2}[Tt]([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9]"
                 r"(\.[0-9]+)?([Zz]|[+-]([01][0-9]|2[0-3]):[0-5][0-9])$",
    "date": r"^[0-9]{4}-(0[1-9]|1[0-2])-[0-3][0-9]$",
    "time": r"^([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\.[0-9]+)?"
            r"([Zz]|[+-]([01][0-9]|2[0-3]):[0-5][0-9])$",
    "ipv4": r"^([12]?[0-9]{1,2}\.){3}[12]?[0-9]{1,2}$",
    "json-pointer": r"^(/([^~/]|~[01])*)*$",
}


@functools.lru_cache(maxsize=None)
def checker_strings(name: str):
    language = CHECKER_LANGUAGES[name].removeprefix("^").removesuffix("$")
    return st.from_regex(generation_pattern(language), fullmatch=True).filter(
        lambda value: CHECKER.conforms(value, name))


@pytest.mark.parametrize("name", sorted(CHECKER_LANGUAGES))
@settings(PROPERTY_SETTINGS, max_examples=100)
@given(data=st.data())
def test_what_the_checker_accepts_the_pattern_matches(name, data):
    value = data.draw(checker_strings(name))
    assert pattern_accepts(name, value), f"{name}: the pattern misses {value!r}"


def test_date_is_calendar_exact():
    # Feb 29 of every year, and every month/day pair of years around the leap rules
    # (Python's re only: re and gxg are compared on the tables and the properties).
    date = re.compile(FORMAT_PATTERNS["date"])
    days = [f"{year:04d}-02-{day}" for year in range(10000) for day in ("28", "29", "30")]
    days += [f"{year:04d}-{month:02d}-{day:02d}" for year in (1, 4, 100, 1600, 1900, 2000,
                                                               2023, 2024, 9999)
             for month in range(14) for day in range(33)]
    for value in days:
        assert (date.fullmatch(value) is not None) == CHECKER.conforms(value, "date"), value


def test_ipv6_matches_python_on_every_short_address_shape():
    # Every way of writing 0-8 groups with at most one '::' (and optionally an IPv4 tail),
    # including ill-formed ones: the pattern agrees with ipaddress on all of them.
    for groups in range(0, 10):
        for double in [None] + list(range(groups + 1)):
            for tail in ("", "1.2.3.4"):
                parts = ["1"] * groups + ([tail] if tail else [])
                if double is None:
                    text = ":".join(parts)
                else:
                    text = ":".join(parts[:double]) + "::" + ":".join(parts[double:])
                assert pattern_accepts("ipv6", text) == CHECKER.conforms(text, "ipv6"), text
    for text in itertools.product(["1", ":", "::", "1.2.3.4", "ffff"], repeat=4):
        text = "".join(text)
        assert pattern_accepts("ipv6", text) == CHECKER.conforms(text, "ipv6"), text


# ----------------------------------------------------------------------------- idn-hostname

def idn_letters():
    """The non-ASCII code points the idn-hostname pattern accepts as a one-letter name."""
    pattern = re.compile(FORMAT_PATTERNS["idn-hostname"])
    return [cp for cp in range(0x80, 0x10000) if pattern.fullmatch(chr(cp))]


def test_idn_letters_are_safe_in_any_sequence():
    letters = idn_letters()
    assert 30000 < len(letters) and max(letters) <= 0xD7A3     # the Punycode bound assumes it
    # A code point that is the second of a canonical composition pair could merge with the one
    # before it under NFC; Hangul vowel and trailing jamo compose algorithmically.
    second_of_pair = {0x1161 + i for i in range(21)} | {0x11A8 + i for i in range(27)}
    for cp in range(0x110000):
        decomposition = unicodedata.decomposition(chr(cp)).split()
        if len(decomposition) == 2 and not decomposition[0].startswith("<"):
            second_of_pair.add(int(decomposition[1], 16))
    for cp in letters:
        letter = chr(cp)
        assert unicodedata.category(letter).startswith("L"), hex(cp)
        assert unicodedata.combining(letter) == 0, hex(cp)
        assert unicodedata.bidirectional(letter) == "L", hex(cp)
        assert unicodedata.normalize("NFC", letter) == letter, hex(cp)
        assert cp not in second_of_pair, hex(cp)
        idna.encode(letter)                 # PVALID (raises otherwise)
    # Nothing above the BMP either (sampled: the pattern's classes are BMP ranges).
    pattern = re.compile(FORMAT_PATTERNS["idn-hostname"])
    assert not any(pattern.fullmatch(chr(cp)) for cp in range(0x10000, 0x110000, 97))


def punycode_digits_bound(value: int, cache={}) -> int:
    """The most base-36 digits Punycode can spend on ``value``, over every threshold t in 1..26
    it could use at each digit (RFC 3492 section 6.3)."""
    if value not in cache:
        cache[value] = 1 if value == 0 else 1 + max(
            punycode_digits_bound((value - t) // (36 - t)) for t in range(1, min(26, value) + 1))
    return cache[value]


def punycode_length_bound(length: int, max_code_point: int) -> int:
    """Octets of the A-label of any U-label of ``length`` code points, all <= max_code_point."""
    worst = 0
    for non_ascii in range(1, length + 1):
        ascii_count = length - non_ascii
        # Sum of the deltas: per code point value a jump of at most (max_code_point - 128) in
        # all times (length + 1), plus at most length + 1 per distinct value.
        budget = (max_code_point - 128 + non_ascii) * (length + 1)
        cheapest = {}                    # digits -> the smallest delta needing that many
        for digits in range(1, 12):
            lo, hi = 0, budget + 1
            while lo < hi:
                mid = (lo + hi) // 2
                if punycode_digits_bound(mid) >= digits:
                    hi = mid
                else:
                    lo = mid + 1
            cheapest[digits] = lo
        # Most digits for non_ascii deltas within the budget (a small knapsack).
        best = {0: 0}                    # cost -> digits, pruned to useful states
        for _ in range(non_ascii):
            step = {}
            for cost, total in best.items():
                for digits, price in cheapest.items():
                    if cost + price <= budget and step.get(cost + price, -1) < total + digits:
                        step[cost + price] = total + digits
            best = step
        worst = max(worst, 4 + ascii_count + (1 if ascii_count else 0) + max(best.values()))
    return worst


def test_u_label_lengths_fit_their_budgets():
    # The first label may have 9 code points (63 octets encoded), the others 7 (46 octets).
    assert punycode_length_bound(9, 0xD7A3) <= 63
    assert punycode_length_bound(7, 0xD7A3) <= 46
    worst_first = "\ud7a3\uac00" * 4 + "\u00df"
    worst_other = "\u00df\ud7a3" * 3 + "a"
    for name in (worst_first + "." + (worst_other + ".") * 4, "例" * 9 + "." + "例" * 7):
        assert pattern_accepts("idn-hostname", name)
        assert len(idna.encode(name)) <= 253
    assert not pattern_accepts("idn-hostname", "例" * 10)
    assert not pattern_accepts("idn-hostname", "a.例例例例例例例例")


def test_hostname_length_limits():
    assert len(LONG_HOSTNAME) == 249 and pattern_accepts("hostname", LONG_HOSTNAME)
    assert not pattern_accepts("hostname", LONG_HOSTNAME + ".b")
    longest_idn = "a" * 63 + ("." + "b" * 46) * 4
    assert len(longest_idn) == 251 and pattern_accepts("idn-hostname", longest_idn + ".")
