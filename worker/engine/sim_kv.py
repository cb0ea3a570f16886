"""KV block accounting for the simulated engine, with a prefix cache like vLLM's."""

from __future__ import annotations

from collections import OrderedDict


class BlockPool:
    """KV blocks with reference-counted, hash-addressed full blocks (a prefix cache).

    `used` counts blocks held by requests. Released full blocks stay in `evictable` (LRU) and
    are reused on a hash hit or evicted when space is needed; like vLLM, they count as free.
    """

    def __init__(self, num_blocks: int) -> None:
        self.num_blocks = num_blocks
        self.used = 0
        self.refs: dict[int, int] = {}
        self.evictable: OrderedDict[int, None] = OrderedDict()

    @property
    def free(self) -> int:
        return self.num_blocks - self.used

    def allocate(self, n: int) -> bool:
        if n > self.free:
            return False
        self.used += n
        while self.used + len(self.evictable) > self.num_blocks:
            self.evictable.popitem(last=False)
        return True

    def touch(self, h: int) -> bool:
        """Take a reference on a cached block; False when the hash is not cached."""
        if h in self.refs:
            self.refs[h] += 1
            return True
        if h in self.evictable and self.free > 0:
            del self.evictable[h]
            self.refs[h] = 1
            self.used += 1
            return True
        return False

    def publish(self, h: int) -> bool:
        """Make an owned, now full block findable by hash; False if the hash already exists."""
        if h in self.refs or h in self.evictable:
            return False
        self.refs[h] = 1
        return True

    def release(self, blocks: list[int | None]) -> None:
        for h in blocks:
            if h is None:
                self.used -= 1
                continue
            # A shared block is one physical block however many requests hold it.
            self.refs[h] -= 1
            if self.refs[h] == 0:
                del self.refs[h]
                self.evictable[h] = None
                self.used -= 1
