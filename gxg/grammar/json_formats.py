"""JSON Schema ``format`` as regular expressions over the decoded string value.

In:  a ``format`` name from a JSON Schema (``"date-time"``, ``"uuid"``, ...).
Out: an ECMAScript regular expression (a ``str``) that is matched IN FULL against the string's
     content between the quotes, after JSON unescaping; it is compiled by
     ``gxg.grammar.regex.regex_to_grammar``. ``format_pattern`` returns None for a name gxg does
     not know: in JSON Schema an unknown format is an annotation and constrains nothing.

Contract (the reference is ``jsonschema``'s format checker with all its extras installed,
``Draft202012Validator.FORMAT_CHECKER``, which is what labels the data gxg is measured on):

* EXACT: every string a pattern matches is accepted by the checker for that format. A pattern
  may be stricter than the checker, never looser, because a grammar that lets through a value
  the schema forbids is a correctness bug.
* As complete as a regular expression of reasonable size allows: what real data uses is
  accepted. What each format leaves out of the checker's language is listed below.

The patterns use only syntax on which ECMAScript, gxg and Python's ``re`` agree (classes,
negated or not, of literal characters and escaped punctuation, ``(?:...)``, ``|``,
``* + ? {m} {m,n}``; non-ASCII characters are written into the pattern as themselves, not as
escapes), so Python's ``re.fullmatch`` and ``hypothesis.strategies.from_regex`` see the same
language as gxg, which the tests rely on.

Left out everywhere: several of the checker's regular expressions end in ``$``, which in Python
also matches before a final ``\\n``, so it accepts ``"2022-01-01T12:00:00Z\\n"`` (date-time,
time), ``"example.com\\n"`` (hostname) and a trailing newline after any uri / iri value.

Per format (``ALPHA`` = A-Z a-z, ``HEX`` = 0-9 A-F a-f):

date
    ``YYYY-MM-DD``, years 0001-9999, exact days per month, Feb 29 only in Gregorian leap years
    (divisible by 4, centuries only when divisible by 400). Nothing left out.
time, date-time
    RFC 3339 as ``rfc3339-validator`` checks it: ``HH:MM:SS``, optional ``.`` and 1+ digit
    fraction, then ``Z``/``z`` or ``+HH:MM``/``-HH:MM`` (hours 00-23); date-time joins a date
    and a time with ``T`` or ``t``. The checker has no leap second (``:60``), no space
    separator, no offset without colon. Nothing left out.
duration
    ``[+-]?P`` then ``nYnMnD`` (each optional, in order, at least one) with an optional ``T`` part
    ``nHnMnS`` (at least one), or ``PnW`` alone; n is digits with an optional ``.``/``,``
    fraction. Left out (the checker, ``isoduration``, accepts them): signed or exponent numbers
    (``P-1D``, ``P1e3D``), numbers without digits on one side of the point (``P.5D``, ``P5.D``),
    weeks with other parts (``P0Y1W``, ``P1WT1H``).
email, idn-email
    The checker only requires an ``@``. The pattern is a common subset of RFC 5321 / RFC 6531:
    local part a dot-atom (1+ runs of ALPHA, digits and ``!#$%&'*+/=?^_`{|}~-`` joined by single
    dots) or a quoted string of printable ASCII (``\\`` escapes a printable character); domain
    dot-separated labels of ALPHA, digits and ``-`` (not first or last in a label) or an IPv4
    literal ``[1.2.3.4]``. idn-email also allows the non-ASCII characters of RFC 3987's
    ``ucschar`` in dot-atoms and labels. Left out: everything else with an ``@`` (comments,
    IPv6 literals, empty sides, spaces outside quotes, ...). No length limits.
hostname
    As ``fqdn`` checks it: labels of ALPHA, digits and ``-`` (not first or last), 1-63 long,
    joined by dots, an optional final dot; one label is enough. The checker's limit of 253
    characters in all is enforced by a stricter shape: the first label up to 63 characters,
    then at most 6 more labels of up to 30 (at most 249 characters). Left out: longer names
    within 253 characters (a label after the first longer than 30, more than 7 labels) and
    the non-ASCII decimal digits ``fqdn``'s ``\\d`` lets through (``"١٢.com"``).
idn-hostname
    As ``idna.encode`` (IDNA 2008) checks it, for a subset. A label is either ASCII (ALPHA,
    digits, ``-``; no ``-`` first, last or in both 3rd and 4th place, so no ``xn--`` A-labels)
    or a U-label without hyphens: lowercase a-z, digits and the letters of Latin-1, Latin
    Extended-A, Greek, Cyrillic, Hiragana, Katakana, CJK Unified Ideographs and Hangul
    syllables that are IDNA PVALID, left-to-right, not combining and stable under NFC in any
    sequence (the tests check each one). A U-label has at most 9 code points (first label) or
    7 (the others): then its Punycode A-label provably fits 58 or 46 octets (bound taken over
    every choice of Punycode thresholds, all code points <= U+D7A3). At most 5 labels: the
    first up to 63 octets encoded, the others up to 46, so the encoded name has at most 251.
    Left out: A-labels (``xn--...``), hyphens in U-labels, other scripts (right-to-left,
    Indic, Latin Extended-B, ...), ``U+3002`` and other dots as separators, longer or more
    labels. (Uppercase letters in a U-label, ``"Bücher"``, the checker rejects itself.)
ipv4
    ``ipaddress.IPv4Address``: four decimal octets 0-255 without leading zeros. Nothing left out.
ipv6
    ``ipaddress.IPv6Address`` without a zone id (the checker rejects those): eight groups of 1-4
    HEX, or fewer with one ``::`` standing for one or more zero groups, the last two groups
    possibly an IPv4 address. Nothing left out.
uri, uri-reference, iri, iri-reference
    The RFC 3986 / RFC 3987 grammar exactly as the ``rfc3987`` package writes it (which is what
    the checker runs; IPv4 parts of an IPv6 host literal may have leading zeros there).
    Nothing left out.
uri-template
    RFC 6570, level 4, for a subset of what ``uri_template`` accepts: literals are RFC 6570
    literals (no space, ``"'<>\\^`|``, ``%`` only as ``%HH``), expressions ``{`` optional operator
    ``+#./;?&`` then comma-separated variables ``name`` (word characters, inner single dots)
    with an optional ``:1``-``:999`` prefix or ``*`` explode. Left out: literals the checker
    lets through (spaces, lone ``%``, ``<`` ...), ``%HH`` in variable names, prefixes with
    leading zeros, empty or repeated dots and the checker's own extensions (``{,a}``,
    ``{a,}``, ``{a/b}``, ``{a[]}``, defaults ``{a=b}``).
uuid
    ``8-4-4-4-12`` HEX with hyphens, any case. Left out: the odd spellings that Python's
    ``UUID`` also tolerates while hyphens stand at indexes 8, 13, 18 and 23 (further hyphens,
    braces at the ends, ``urn:`` / ``uuid:`` or ``_`` inside).
json-pointer
    RFC 6901: empty, or ``/``-prefixed tokens in which ``~`` is followed by ``0`` or ``1``.
    Nothing left out (the tokens may hold any code point).
relative-json-pointer
    A non-negative integer then ``#`` or a JSON pointer. The checker rejects any integer with a
    ``0`` followed by a digit (``"100"``, ``"105"``, not only a leading zero), so the integer is
    ``0`` or nonzero digits optionally followed by one ``0``. Left out: integers of non-ASCII
    digits.

Known to the checker but not regular, so None: ``regex`` (ECMAScript regex syntax is not a
regular language: nested groups).
"""
from __future__ import annotations

from typing import Dict, Iterable, List, Optional, Tuple

__all__ = ["FORMAT_PATTERNS", "format_pattern"]


def _char_class(ranges: Iterable[Tuple[int, int]]) -> str:
    """The inside of a character class for code point ranges, as literal characters (all the
    ranges handed in are non-ASCII, so none of them is special inside a class)."""
    return "".join(chr(lo) if lo == hi else f"{chr(lo)}-{chr(hi)}" for lo, hi in ranges)


def _every_other(*spans: Tuple[int, int]) -> List[Tuple[int, int]]:
    """Every other code point of each span, both ends included (the lowercase letters of blocks
    that alternate upper- and lowercase)."""
    return [(cp, cp) for first, last in spans for cp in range(first, last + 1, 2)]


# ---------------------------------------------------------------------------------- dates
_YEAR = "(?:[1-9][0-9]{3}|0[1-9][0-9]{2}|00[1-9][0-9]|000[1-9])"   # 0001-9999: no year 0
_MULTIPLE_OF_4 = "(?:0[48]|[2468][048]|[13579][26])"               # 04..96, not 00
_LEAP_YEAR = f"(?:[0-9]{{2}}{_MULTIPLE_OF_4}|{_MULTIPLE_OF_4}00)"
_DATE = (
    f"(?:{_YEAR}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])"
    "|(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)"
    "|02-(?:0[1-9]|1[0-9]|2[0-8]))"
    f"|{_LEAP_YEAR}-02-29)"
)
_HOUR = "(?:[01][0-9]|2[0-3])"
_TIME = (
    f"{_HOUR}:[0-5][0-9]:[0-5][0-9](?:\\.[0-9]+)?"
    f"(?:[Zz]|[+-]{_HOUR}:[0-5][0-9])"
)
_DATE_TIME = f"{_DATE}[Tt]{_TIME}"

_NUMBER = "[0-9]+(?:[.,][0-9]+)?"
_DURATION_TIME = (
    f"T(?:{_NUMBER}H(?:{_NUMBER}M)?(?:{_NUMBER}S)?|{_NUMBER}M(?:{_NUMBER}S)?|{_NUMBER}S)"
)
_DURATION = (
    f"[+-]?P(?:(?:{_NUMBER}Y(?:{_NUMBER}M)?(?:{_NUMBER}D)?|{_NUMBER}M(?:{_NUMBER}D)?"
    f"|{_NUMBER}D)(?:{_DURATION_TIME})?|{_DURATION_TIME}|{_NUMBER}W)"
)

# ----------------------------------------------------------------------------- addresses
_HEX = "[0-9A-Fa-f]"
_OCTET = "(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])"           # no leading zeros
_IPV4 = f"{_OCTET}(?:\\.{_OCTET}){{3}}"


def _ipv6(ipv4: str) -> str:
    """IPv6 text form: 8 groups, or fewer with one ``::`` standing for 1+ zero groups; an IPv4
    address may stand for the last two groups (then it follows 6 groups' worth of prefix)."""
    group = f"{_HEX}{{1,4}}"

    def left_then_double_colon(left: int) -> str:
        return "::" if left == 0 else f"(?:{group}:){{{left - 1}}}{group}::"

    # All hex: 'left' groups, '::', then at most 7 - left groups.
    hex_only = [f"(?:{group}:){{7}}{group}"]
    for left in range(8):
        right = 7 - left
        tail = f"(?:{group}(?::{group}){{0,{right - 1}}})?" if right else ""
        hex_only.append(left_then_double_colon(left) + tail)
    # Before an IPv4 address: 6 groups each followed by ':', or 'left' groups, '::', then at most
    # 5 - left groups each followed by ':'.
    prefix = [f"(?:{group}:){{6}}"]
    for left in range(6):
        prefix.append(f"{left_then_double_colon(left)}(?:{group}:){{0,{5 - left}}}")
    return f"(?:{'|'.join(hex_only)}|(?:{'|'.join(prefix)}){ipv4})"


_IPV6 = _ipv6(_IPV4)

# ------------------------------------------------------------------------------- uuid
_UUID = f"{_HEX}{{8}}-{_HEX}{{4}}-{_HEX}{{4}}-{_HEX}{{4}}-{_HEX}{{12}}"

# ----------------------------------------------------------------------- URIs and IRIs
# Transcribed from the rfc3987 package's rules (RFC 3986 appendix A, RFC 3987 section 2.2).
_UCSCHAR = _char_class(
    [(0xA0, 0xD7FF), (0xF900, 0xFDCF), (0xFDF0, 0xFFEF)]
    + [(plane << 16, (plane << 16) | 0xFFFD) for plane in range(1, 14)]
    + [(0xE1000, 0xEFFFD)]
)
_IPRIVATE = _char_class([(0xE000, 0xF8FF), (0xF0000, 0xFFFFD), (0x100000, 0x10FFFD)])
_PCT = f"%{_HEX}{{2}}"
_UNRESERVED = "A-Za-z0-9._~-"      # class bodies; '-' stays last where they are concatenated
_SUB_DELIMS = "!$&'()*+,;="
# rfc3987's IPv4 part of an IPv6 host literal allows leading zeros (RFC 3986 does not).
_URI_OCTET = "(?:25[0-5]|2[0-4][0-9]|[01]?[0-9][0-9]?)"
_URI_IPV6 = _ipv6(f"{_URI_OCTET}(?:\\.{_URI_OCTET}){{3}}")
_IP_LITERAL = f"\\[(?:{_URI_IPV6}|v{_HEX}+\\.[{_SUB_DELIMS}:{_UNRESERVED}]+)\\]"


def _uri_patterns(extra: str, query_extra: str) -> Tuple[str, str]:
    """(absolute, reference) patterns; ``extra`` adds characters to 'unreserved' (IRIs:
    ucschar) and ``query_extra`` to the query (IRIs: iprivate)."""
    unreserved = f"{extra}{_UNRESERVED}"
    pchar = f"(?:[{_SUB_DELIMS}:@{unreserved}]|{_PCT})"
    segment_nz_nc = f"(?:[{_SUB_DELIMS}@{unreserved}]|{_PCT})+"
    userinfo = f"(?:[{_SUB_DELIMS}:{unreserved}]|{_PCT})*"
    # rfc3987's IPv4address is a reg_name too (digits and dots), so host needs no IPv4 case.
    reg_name = f"(?:[{_SUB_DELIMS}{unreserved}]|{_PCT})*"
    authority = f"(?:{userinfo}@)?(?:{_IP_LITERAL}|{reg_name})(?::[0-9]*)?"
    query = f"(?:[{_SUB_DELIMS}:@/?{query_extra}{unreserved}]|{_PCT})*"
    fragment = f"(?:[{_SUB_DELIMS}:@/?{unreserved}]|{_PCT})*"
    segments = f"(?:/{pchar}*)*"
    scheme = "[A-Za-z][A-Za-z0-9+.-]*"
    suffix = f"(?:\\?{query})?(?:#{fragment})?"
    rooted = f"(?://{authority}{segments}|/(?:{pchar}+{segments})?)"   # authority or '/' path
    absolute = f"{scheme}:(?:{rooted}|(?:{pchar}+{segments})?){suffix}"
    # URI | relative-ref, with the authority written once: a rooted part with or without a
    # scheme, a rootless path after a scheme, or a path without ':' in its first segment.
    reference = (
        f"(?:(?:{scheme}:)?{rooted}|{scheme}:(?:{pchar}+{segments})?"
        f"|(?:{segment_nz_nc}{segments})?){suffix}"
    )
    return absolute, reference


_URI, _URI_REFERENCE = _uri_patterns("", "")
_IRI, _IRI_REFERENCE = _uri_patterns(_UCSCHAR, _IPRIVATE)

# ---------------------------------------------------------------------------- uri-template
_TEMPLATE_LITERAL = f"(?:[!#$&(-;=?-\\[\\]_a-z~{_UCSCHAR}{_IPRIVATE}]|{_PCT})"
_VARSPEC = "[A-Za-z0-9_]+(?:\\.[A-Za-z0-9_]+)*(?::[1-9][0-9]{0,2}|\\*)?"
_URI_TEMPLATE = f"(?:{_TEMPLATE_LITERAL}|\\{{[+#./;?&]?{_VARSPEC}(?:,{_VARSPEC})*\\}})*"

# ------------------------------------------------------------------------------ hostnames


def _label(chars: str, max_length: int, idna_hyphens: bool) -> str:
    """A DNS label of 1..max_length characters from class body ``chars`` and '-', not starting
    or ending with '-'; with ``idna_hyphens`` also not '-' in both 3rd and 4th place (IDNA 2008
    reserves that for A-labels such as 'xn--')."""
    c = f"[{chars}]"
    body = f"[{chars}-]"
    if not idna_hyphens:
        return f"{c}(?:{body}{{0,{max_length - 2}}}{c})?"
    assert max_length >= 5
    up_to_3 = f"{c}(?:{body}?{c})?"
    # 4+ characters: 3rd a letter/digit (then anything) or 3rd '-' and 4th a letter/digit.
    longer = (
        f"{c}{body}(?:{c}(?:{c}|{body}{{1,{max_length - 4}}}{c})"
        f"|-{c}(?:{body}{{0,{max_length - 5}}}{c})?)"
    )
    return f"(?:{longer}|{up_to_3})"


_LDH = "A-Za-z0-9"
# First label up to 63, 6 more up to 30: at most 63 + 6 * 31 = 249 <= 253 characters.
_HOSTNAME = f"{_label(_LDH, 63, False)}(?:\\.{_label(_LDH, 30, False)}){{0,6}}\\.?"

# Letters allowed in U-labels (see the module docstring; the tests check every one of them).
_IDN_LETTERS = _char_class(
    [(0xDF, 0xF6), (0xF8, 0xFF)]                                   # Latin-1 (ß-ö, ø-ÿ)
    + _every_other((0x101, 0x131), (0x135, 0x137), (0x138, 0x138), (0x13A, 0x13E),
                   (0x142, 0x148), (0x14B, 0x177), (0x17A, 0x17E))    # Latin Extended-A
    + [(0x390, 0x390), (0x3AC, 0x3CE)]                              # Greek
    + [(0x430, 0x45F)]                                              # Cyrillic
    + [(0x3041, 0x3096), (0x309D, 0x309E), (0x30A1, 0x30FA), (0x30FC, 0x30FE)]  # kana
    + [(0x4E00, 0x9FFF)]                                            # CJK Unified Ideographs
    + [(0xAC00, 0xD7A3)]                                            # Hangul syllables
)
_U_LABEL_CHARS = f"a-z0-9{_IDN_LETTERS}"
# Punycode bound (every code point <= U+D7A3, digits counted for the worst thresholds): a U-label
# of 9 code points encodes to at most 58 octets, of 7 to at most 46. The first label gets 63
# octets, up to 4 more get 46 each: at most 63 + 4 * 47 = 251 <= 253 octets encoded.
# U-labels have no hyphens, which keeps them one character class (and the pattern small).
_IDN_FIRST_LABEL = f"(?:{_label(_LDH, 63, True)}|[{_U_LABEL_CHARS}]{{1,9}})"
_IDN_OTHER_LABEL = f"(?:{_label(_LDH, 46, True)}|[{_U_LABEL_CHARS}]{{1,7}})"
_IDN_HOSTNAME = f"{_IDN_FIRST_LABEL}(?:\\.{_IDN_OTHER_LABEL}){{0,4}}\\.?"

# --------------------------------------------------------------------------------- email
_ATEXT = "A-Za-z0-9!#$%&'*+/=?^_`{|}~-"


def _email(extra: str) -> str:
    atom = f"[{extra}{_ATEXT}]+"
    quoted = '"(?:[ !#-\\[\\]-~]|\\\\[ -~])*"'
    label = f"[{extra}{_LDH}](?:[{extra}{_LDH}-]*[{extra}{_LDH}])?"
    return f"(?:{atom}(?:\\.{atom})*|{quoted})@(?:{label}(?:\\.{label})*|\\[{_IPV4}\\])"


_EMAIL = _email("")
_IDN_EMAIL = _email(_UCSCHAR)

# -------------------------------------------------------------------------- json pointers
_JSON_POINTER = "(?:/(?:[^~/]|~[01])*)*"
_RELATIVE_JSON_POINTER = f"(?:0|[1-9]+0?)(?:#|{_JSON_POINTER})"

FORMAT_PATTERNS: Dict[str, str] = {
    "date": _DATE,
    "time": _TIME,
    "date-time": _DATE_TIME,
    "duration": _DURATION,
    "email": _EMAIL,
    "idn-email": _IDN_EMAIL,
    "hostname": _HOSTNAME,
    "idn-hostname": _IDN_HOSTNAME,
    "ipv4": _IPV4,
    "ipv6": _IPV6,
    "uri": _URI,
    "uri-reference": _URI_REFERENCE,
    "iri": _IRI,
    "iri-reference": _IRI_REFERENCE,
    "uri-template": _URI_TEMPLATE,
    "uuid": _UUID,
    "json-pointer": _JSON_POINTER,
    "relative-json-pointer": _RELATIVE_JSON_POINTER,
}


def format_pattern(name: str) -> Optional[str]:
    """The pattern for format ``name`` (matched in full), or None for a format gxg does not
    know or cannot express (see the module docstring)."""
    return FORMAT_PATTERNS.get(name)
