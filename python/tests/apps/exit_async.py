"""An asyncio program whose last steps are awaited redlease calls (test_life.py)."""

import asyncio
import sys

import redlease


async def main(url: str) -> None:
    client = await redlease.AsyncClient.connect(url)
    async with client.lock("exit-async", ttl=5.0):
        pass
    guard = await client.lock("exit-async", ttl=5.0).acquire()
    await guard.release()


asyncio.run(main(sys.argv[1]))
