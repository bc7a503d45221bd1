"""How SecureBoost's label party reaches the feature parties: every message serialised and counted by party, direction
and kind (:class:`Link`), handed to a party in this process (:class:`LocalLink`) or sent across processes through a
transport of bytes (:class:`RemoteLink`); a party process answers in :func:`serve`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from typing import Protocol as _Protocol

from .messages import decode, encode


class RequestHandler(_Protocol):
    """A feature party as a link sees it (trees.secureboost.FeatureParty): a request in, a reply or None out."""

    def handle(self, data: bytes) -> bytes | None: ...


@dataclass
class Traffic:
    """Bytes by party, direction and message kind, in one phase ("train" or "eval")."""

    k: int
    by_kind: dict[str, list[int]] = field(default_factory=dict)

    def add(self, kind: str, direction: str, party: int, nbytes: int) -> None:
        self.by_kind.setdefault(f"{kind}_{direction}", [0] * self.k)[party] += int(nbytes)


REPLIES = {"setup", "build", "split", "predict"}  # the requests a party answers; the others it only takes in


class PartyGone(Exception):
    """A party process stopped while the label party exchanged with it (found by the transport). ``sent``: whether
    the request had left (it is counted then, as it crossed)."""

    def __init__(self, party: int, cause: str, sent: bool):
        super().__init__(f"party {party} lost ({cause})")
        self.party, self.cause, self.sent = party, cause, sent


class Link:
    """The label party's side of the messages: each is serialised, counted (by party, direction and kind, and through
    ``book(party, up, down)`` in the run's channel) and exchanged (:meth:`exchange`: in this process, or across).
    A party in ``lost`` is sent nothing and counted nothing."""

    def __init__(self, k: int, book: Callable[[int, int, int], None]):
        self.k, self.book = k, book
        self.traffic: dict[str, Traffic] = {}
        self.phase = "train"
        self.lost: set[int] = set()

    def exchange(self, k: int, data: bytes, reply: bool) -> bytes | None:
        raise NotImplementedError

    def ask(self, k: int, kind: str, **fields) -> tuple[str, dict[str, Any]] | None:
        if k in self.lost:
            return None
        data = encode(kind, **fields)
        t = self.traffic.setdefault(self.phase, Traffic(self.k))
        try:
            back = self.exchange(k, data, kind in REPLIES)
        except PartyGone as e:
            if e.sent:
                t.add(kind, "down", k, len(data))
                self.book(k, 0, len(data))
            raise
        t.add(kind, "down", k, len(data))
        self.book(k, 0 if back is None else len(back), len(data))
        if back is None:
            return None
        got = decode(back)
        t.add(got[0], "up", k, len(back))
        return got

    tell = ask

    def ask_all(self, ks: list[int], kind: str, each: list[dict] | None = None, **fields) -> list:
        """A request to each party of ``ks`` (the lost ones skipped): ``fields``, and ``each[i]``'s for the i-th of
        ``ks``. Their replies in that order, exchanged at once where the link can (:meth:`exchange_all`), so the
        parties compute side by side as they would on machines of their own, and counted in that order as
        :meth:`ask` counts them (a party gone stops the count there, as one request after another would)."""
        each = each or [{}] * len(ks)
        pairs = [(k, e) for k, e in zip(ks, each, strict=True) if k not in self.lost]
        ks = [k for k, _ in pairs]
        datas = [encode(kind, **fields, **e) for _, e in pairs]
        t = self.traffic.setdefault(self.phase, Traffic(self.k))
        out = []
        for k, data, back in zip(ks, datas, self.exchange_all(ks, datas, kind in REPLIES), strict=False):
            if isinstance(back, PartyGone):
                if back.sent:
                    t.add(kind, "down", k, len(data))
                    self.book(k, 0, len(data))
                raise back
            t.add(kind, "down", k, len(data))
            self.book(k, 0 if back is None else len(back), len(data))
            if back is None:
                out.append(None)
                continue
            got = decode(back)
            t.add(got[0], "up", k, len(back))
            out.append(got)
        return out

    def exchange_all(self, ks: list[int], datas: list[bytes], reply: bool) -> list:
        """Each party's reply (or the PartyGone that ended it), one exchange after another."""
        out: list = []
        for k, data in zip(ks, datas, strict=True):
            try:
                out.append(self.exchange(k, data, reply))
            except PartyGone as e:
                out.append(e)
                break
        return out


class LocalLink(Link):
    """Every party in this process: a message is handed to the party, and its reply comes back."""

    def __init__(self, parties: list[RequestHandler], book: Callable[[int, int, int], None]):
        super().__init__(len(parties), book)
        self.parties = parties

    def exchange(self, k: int, data: bytes, reply: bool) -> bytes | None:
        return self.parties[k].handle(data)

    def exchange_all(self, ks: list[int], datas: list[bytes], reply: bool) -> list:
        """The parties handle the request in threads of this process: their work runs in their worker processes
        (vflbench.trees.he.pool), so they compute side by side while the threads wait."""
        if len(ks) < 2:
            return super().exchange_all(ks, datas, reply)
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(len(ks)) as ex:
            futures = [ex.submit(self.parties[k].handle, data) for k, data in zip(ks, datas, strict=True)]
        out: list = []
        for f in futures:
            e = f.exception()
            if isinstance(e, PartyGone):
                out.append(e)
                break
            out.append(f.result())
        return out


class RemoteLink(Link):
    """The parties in their own processes: the same messages through a transport of bytes (``to_party(k, data)``,
    ``from_party(k)``: vflbench.federation.wire.WireMessages)."""

    def __init__(self, transport, k: int, book: Callable[[int, int, int], None]):
        super().__init__(k, book)
        self.transport = transport

    def exchange(self, k: int, data: bytes, reply: bool) -> bytes | None:
        self.transport.to_party(k, data)
        if cause := self.transport.lost(k):  # it stopped before the request left
            raise PartyGone(k, cause, sent=False)
        if not reply:
            return None
        back = self.transport.from_party(k)
        if cause := self.transport.lost(k):  # it stopped before it answered
            raise PartyGone(k, cause, sent=True)
        return back

    def exchange_all(self, ks: list[int], datas: list[bytes], reply: bool) -> list:
        """Every request sent first, then every reply read: the party processes compute side by side."""
        out: list = []
        sent = []
        for k, data in zip(ks, datas, strict=True):
            self.transport.to_party(k, data)
            if cause := self.transport.lost(k):
                out.append(PartyGone(k, cause, sent=False))
                break
            sent.append(k)
        replies: list = []
        for k in sent:
            if not reply:
                replies.append(None)
                continue
            back = self.transport.from_party(k)
            if cause := self.transport.lost(k):
                replies.append(PartyGone(k, cause, sent=True))
                break
            replies.append(back)
        if replies and isinstance(replies[-1], PartyGone):  # gone while answering: nothing after it counts
            return replies
        return replies + out  # (out: the party found gone as its request left, if one was)


def serve(party: RequestHandler, transport, until: str = "stop", hooks: dict[str, Callable] | None = None) -> None:
    """A party process: answer the label party's requests until it says ``until``. ``hooks``: per message kind, a
    call with the message's fields before the party handles it (the run's side of a message: a tree begins, the
    party leaves or comes back)."""
    while True:
        data = transport.from_server()
        kind, fields = decode(data)
        if kind == until:
            return
        if hooks and kind in hooks:
            hooks[kind](**fields)
        reply = party.handle(data)
        if reply is not None:
            transport.to_server(reply)
