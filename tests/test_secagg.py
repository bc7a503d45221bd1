"""Secure aggregation with real keys (vflbench.privacy.secagg.KeyedMasking), tested by attacking it.

* Known answers: the RFC 7539 ChaCha20 test vectors, reproduced both by an independent pure-Python
  block function written here and by the library called the way vflbench calls it (counter and
  nonce in ``chacha20_nonce``'s layout).
* No keystream reuse: the masks of releases t and t+1, and of the two directions of a pair, share no
  shifted run (the reuse the earlier nonce layout had: release t+1 = release t shifted by 16 words).
* Independence: the difference attack of the report recovers a party's count differences no better
  than chance, at every shift.
"""

from __future__ import annotations

import os
import struct

import numpy as np
import pytest
import torch

pytest.importorskip("cryptography")

from vflbench.core.errors import VFLBenchError  # noqa: E402
from vflbench.privacy.secagg import (  # noqa: E402
    KeyedMasking,
    agree_pair_keys,
    chacha20_nonce,
    key_fingerprint,
    keystream,
    mask_nonce,
    mask_words,
    pair_key_info,
)

M32 = 0xFFFFFFFF


def _rotl(v: int, n: int) -> int:
    return ((v << n) & M32) | (v >> (32 - n))


def _quarter(x: list[int], a: int, b: int, c: int, d: int) -> None:
    x[a] = (x[a] + x[b]) & M32
    x[d] = _rotl(x[d] ^ x[a], 16)
    x[c] = (x[c] + x[d]) & M32
    x[b] = _rotl(x[b] ^ x[c], 12)
    x[a] = (x[a] + x[b]) & M32
    x[d] = _rotl(x[d] ^ x[a], 8)
    x[c] = (x[c] + x[d]) & M32
    x[b] = _rotl(x[b] ^ x[c], 7)


def chacha20_block(key: bytes, counter: int, nonce: bytes) -> bytes:
    """RFC 7539 section 2.3, written from the RFC (independent of the library under test)."""
    state = [
        0x61707865,
        0x3320646E,
        0x79622D32,
        0x6B206574,
        *struct.unpack("<8I", key),
        counter,
        *struct.unpack("<3I", nonce),
    ]
    x = list(state)
    for _ in range(10):
        for a, b, c, d in (
            (0, 4, 8, 12),
            (1, 5, 9, 13),
            (2, 6, 10, 14),
            (3, 7, 11, 15),
            (0, 5, 10, 15),
            (1, 6, 11, 12),
            (2, 7, 8, 13),
            (3, 4, 9, 14),
        ):
            _quarter(x, a, b, c, d)
    return struct.pack("<16I", *[(u + v) & M32 for u, v in zip(x, state, strict=True)])


def library_keystream(key: bytes, counter: int, nonce: bytes, nbytes: int) -> bytes:
    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms

    return Cipher(algorithms.ChaCha20(key, chacha20_nonce(counter, nonce)), mode=None).encryptor().update(bytes(nbytes))


RFC_2_3_2 = bytes.fromhex(  # key 00..1f, nonce 000000090000004a00000000, block counter 1
    "10f1e7e4d13b5915500fdd1fa32071c4c7d1f4c733c068030422aa9ac3d46c4e"
    "d2826446079faa0914c2d705d98b02a2b5129cd1de164eb9cbd083e8a2503c4e"
)
RFC_A1_1 = bytes.fromhex(  # key zero, nonce zero, counter 0
    "76b8e0ada0f13d90405d6ae55386bd28bdd219b8a08ded1aa836efcc8b770dc7"
    "da41597c5157488d7724e03fb8d84a376a43b8f41518a11cc387b669b2ee6586"
)
RFC_A1_2 = bytes.fromhex(  # key zero, nonce zero, counter 1
    "9f07e7be5551387a98ba977c732d080dcb0f29a048e3656912c6533e32ee7aed"
    "29b721769ce64e43d57133b074d839d531ed1f28510afb45ace10a1f4b794d6f"
)
RFC_2_4_2 = bytes.fromhex(
    "6e2e359a2568f98041ba0728dd0d6981e97e7aec1d4360c20a27afccfd9fae0b"
)  # "Ladies and Gentlemen..." encrypted, counter 1
KEY_0_31 = bytes(range(32))


@pytest.mark.parametrize(
    "key,counter,nonce,expected",
    [
        (KEY_0_31, 1, bytes.fromhex("000000090000004a00000000"), RFC_2_3_2),
        (bytes(32), 0, bytes(12), RFC_A1_1),
        (bytes(32), 1, bytes(12), RFC_A1_2),
    ],
    ids=["2.3.2", "A.1#1", "A.1#2"],
)
def test_chacha20_known_answers_by_the_rfc_by_hand_and_as_vflbench_calls_the_library(key, counter, nonce, expected):
    assert chacha20_block(key, counter, nonce) == expected
    assert library_keystream(key, counter, nonce, 64) == expected


def test_chacha20_encryption_known_answer_and_counter_continuity():
    plain = (
        b"Ladies and Gentlemen of the class of '99: If I could offer you only one tip for the future, "
        b"sunscreen would be it."
    )
    stream = library_keystream(KEY_0_31, 1, bytes.fromhex("000000000000004a00000000"), len(plain))
    assert bytes(p ^ s for p, s in zip(plain, stream, strict=True))[:32] == RFC_2_4_2
    # the library's stream is the block function at counter, counter + 1, ... (the layout KeyedMasking relies on)
    key, nonce = os.urandom(32), os.urandom(12)
    assert library_keystream(key, 5, nonce, 192) == b"".join(chacha20_block(key, c, nonce) for c in (5, 6, 7))


def test_masks_are_the_keystream_of_their_own_release_and_direction_from_block_zero():
    key = os.urandom(32)
    for release, direction in ((0, 0), (6, 1), (2**40 + 3, 0)):
        nonce = mask_nonce(release, direction)
        assert nonce == release.to_bytes(8, "little") + direction.to_bytes(4, "little")
        expected = chacha20_block(key, 0, nonce) + chacha20_block(key, 1, nonce)
        assert keystream(key, release, direction, 128) == expected
        words = np.frombuffer(expected, dtype="<u4").astype(np.int64) & 255
        assert np.array_equal(mask_words(key, release, direction, 32, 8), words)


def shared_runs(a: np.ndarray, b: np.ndarray, max_shift: int, run: int = 2) -> list[int]:
    """Shifts s in [-max_shift, max_shift] at which ``b[k] == a[k + s]`` for ``run`` consecutive k
    somewhere (raw 32-bit keystream words: a chance run of 2 has probability ~n / 2^64)."""
    found = []
    for s in range(-max_shift, max_shift + 1):
        x, y = (a[s:], b[: len(b) - s]) if s >= 0 else (a[: len(a) + s], b[-s:])
        eq = x == y
        if len(eq) >= run and bool(np.any(np.convolve(eq.astype(int), np.ones(run, dtype=int), "valid") == run)):
            found.append(s)
    return found


def raw_words(key: bytes, release: int, direction: int, n: int) -> np.ndarray:
    return np.frombuffer(keystream(key, release, direction, 4 * n), dtype="<u4")


def test_no_keystream_is_shared_across_releases_or_directions():
    key, n = os.urandom(32), 1600  # masks of shape (100, 16), as in the report
    for t in (0, 5, 6, 1000):
        for d in (0, 1):
            assert shared_runs(raw_words(key, t, d, n), raw_words(key, t + 1, d, n), max_shift=n - 2) == []
        assert shared_runs(raw_words(key, t, 0, n), raw_words(key, t, 1, n), max_shift=n - 2) == []
    # the detector finds the reuse of the earlier layout (nonce = release as the block counter): shift 16 words
    old = lambda t: np.frombuffer(library_keystream(key, t, bytes(12), 4 * n), dtype="<u4")  # noqa: E731
    assert 16 in shared_runs(old(5), old(6), max_shift=64)


def test_keyed_masks_of_consecutive_releases_are_not_shifts_of_each_other():
    m = KeyedMasking(0, 2, 8, {1: os.urandom(32)})
    a5, b5 = m._masks(1, 5, (100, 16))
    a6, b6 = m._masks(1, 6, (100, 16))
    for x, y in ((a5, a6), (b5, b6), (a5, b5)):
        x, y = x.flatten().numpy(), y.flatten().numpy()
        for s in range(1, 200):  # 8-bit masks agree by chance 1/256 of the time; a reused stream agrees always
            assert (x[s:] == y[:-s]).mean() < 0.05 and (y[s:] == x[:-s]).mean() < 0.05


def test_the_difference_attack_recovers_count_differences_no_better_than_chance():
    """Party 0 of two uploads y_t = q_t + u_t mod R over many releases. The server guesses the count
    difference q_{t+1}[k] - q_t[k+s] as (y_{t+1}[k] - y_t[k+s]) mod R, at every shift s. With fresh
    keystream per release the guess is right with probability 1/R (here 1/64); with the old reuse it
    was always right at s = 16."""
    gen = np.random.default_rng(0)
    bits, b, releases, shape = 6, 32, 12, (64, 16)
    R = 1 << bits
    # a fixed key: with a fresh one per run the correlation check below (3.3 sigma) failed about once in 1,000 runs
    masking = KeyedMasking(0, 2, bits, {1: bytes(range(32))})
    sent = torch.ones(2, shape[0], dtype=torch.bool)
    q = [torch.from_numpy(gen.integers(0, b + 1, shape)) for _ in range(releases)]
    y = [masking.upload(q[t], sent, t).flatten().numpy() for t in range(releases)]
    qf = [x.flatten().numpy() for x in q]
    n = y[0].size
    worst = 0.0
    for t in range(releases - 1):
        for s in range(0, 65):
            guess = (y[t + 1][: n - s] - y[t][s:]) % R
            truth = (qf[t + 1][: n - s] - qf[t][s:]) % R
            worst = max(worst, float((guess == truth).mean()))
    # 11 release pairs x 65 shifts of ~1000 guesses, each right w.p. 1/64 (0.016): the largest of 715
    # binomial proportions stays far below 0.05 (about 8 standard deviations above chance)
    assert worst < 0.05
    # and an upload carries no linear trace of its count within a release
    corr = np.corrcoef(np.concatenate(y), np.concatenate(qf))[0, 1]
    assert abs(corr) < 0.03


def test_masks_above_32_bits_use_64_bit_words_and_stay_below_the_modulus():
    key = os.urandom(32)
    w = mask_words(key, 0, 0, 4096, 40)
    assert w.min() >= 0 and w.max() < 2**40 and w.max() > 2**36  # 40 random bits, not 32
    with pytest.raises(ValueError):
        mask_words(key, 0, 0, 8, 63)


def test_pair_keys_are_bound_to_the_run_the_pair_and_both_public_keys():
    pa, pb, pc = os.urandom(32), os.urandom(32), os.urandom(32)
    base = pair_key_info("abc", 0, 1, pa, pb)
    assert (
        len(
            {
                base,
                pair_key_info("abd", 0, 1, pa, pb),
                pair_key_info("abc", 0, 2, pa, pb),
                pair_key_info("abc", 0, 1, pa, pc),
            }
        )
        == 4
    )


class _PartyWire:
    """A party's end of the key exchange, the server's relay replaced by a list of public keys."""

    def __init__(self, rank: int, world: int, relayed):
        self.rank, self.world, self.relayed, self.sent = rank, world, relayed, None

    def send(self, t, dst, book):
        self.sent = bytes(t.numpy().tobytes())

    def recv(self, shape, dtype, src, book):
        return torch.from_numpy(np.frombuffer(b"".join(self.relayed(self.sent)), dtype=np.uint8).reshape(shape).copy())


def test_a_substituted_or_low_order_public_key_is_refused_or_shows_in_the_fingerprint():
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

    other = (
        X25519PrivateKey.generate()
        .public_key()
        .public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    )
    fake = (
        X25519PrivateKey.generate()
        .public_key()
        .public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    )
    keys, fp = agree_pair_keys(_PartyWire(1, 3, lambda mine: [mine, other]), "run")
    keys2, fp2 = agree_pair_keys(_PartyWire(1, 3, lambda mine: [mine, fake]), "run")  # an active server's substitution
    assert set(keys) == {1} and len(keys[1]) == 32 and fp != fp2
    assert key_fingerprint([b"a" * 32, b"b" * 32]) == key_fingerprint([b"a" * 32, b"b" * 32])
    with pytest.raises(VFLBenchError, match="low-order"):
        agree_pair_keys(_PartyWire(1, 3, lambda mine: [mine, bytes(32)]), "run")
    with pytest.raises(VFLBenchError, match="another public key for this party"):
        agree_pair_keys(_PartyWire(1, 3, lambda mine: [fake, other]), "run")
