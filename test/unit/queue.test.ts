import { getEventListeners } from 'node:events'
import { setImmediate as nextTurn } from 'node:timers/promises'
import t from 'tap'
import { WorkQueue } from '../../src/controller/queue.js'
import { consistently, until } from '../helpers/until.js'

/** Resolves with the next name, or 'timeout' when none comes within `ms`. */
async function nextWithin(q: WorkQueue, ms: number): Promise<string | undefined> {
  const ac = new AbortController()
  const timer = setTimeout(() => ac.abort(), ms)
  try {
    return (await q.next(ac.signal)) ?? 'timeout'
  } finally {
    clearTimeout(timer)
  }
}

t.test('a name is queued once; order is FIFO', async (t) => {
  const q = new WorkQueue()
  q.add('a')
  q.add('b')
  q.add('a')
  q.add('c')
  q.add('b')
  t.equal(q.length, 3, 'duplicates dropped')
  const signal = new AbortController().signal
  t.equal(await q.next(signal), 'a')
  t.equal(await q.next(signal), 'b')
  t.equal(await q.next(signal), 'c')
  t.equal(q.length, 0)
  t.equal(await nextWithin(q, 20), 'timeout', 'nothing left')
})

t.test('a name taken off the queue can be queued again, even before done', async (t) => {
  const q = new WorkQueue()
  const signal = new AbortController().signal
  q.add('a')
  t.equal(await q.next(signal), 'a')
  q.add('a')
  t.equal(q.length, 0, 'added while active: not queued yet')
  q.add('a')
  t.equal(q.length, 0, 'still one pending re-run')
  t.equal(await nextWithin(q, 20), 'timeout', 'not handed out while active')
  q.done('a')
  t.equal(q.length, 1, 'queued once done')
  t.equal(await q.next(signal), 'a', 'handled again')
  q.done('a')
  t.equal(q.length, 0, 'and only once')
  t.equal(await nextWithin(q, 20), 'timeout')
})

t.test('done without a re-add does not re-queue', async (t) => {
  const q = new WorkQueue()
  const signal = new AbortController().signal
  q.add('a')
  q.add('b')
  t.equal(await q.next(signal), 'a')
  q.done('a')
  t.equal(q.length, 1)
  t.equal(await q.next(signal), 'b')
})

t.test('a waiting next() is woken by add()', async (t) => {
  const q = new WorkQueue()
  const signal = new AbortController().signal
  const pending = q.next(signal)
  setTimeout(() => q.add('late'), 10)
  t.equal(await pending, 'late')
})

t.test('next() returns undefined once aborted', async (t) => {
  const q = new WorkQueue()
  const ac = new AbortController()
  const pending = q.next(ac.signal)
  setTimeout(() => ac.abort(), 10)
  t.equal(await pending, undefined, 'a waiting next() returns undefined on abort')

  q.add('a')
  t.equal(await q.next(ac.signal), undefined, 'an aborted signal returns undefined even with work queued')
  t.equal(q.length, 1, 'and leaves the work queued')
})

t.test('addRateLimited backs off exponentially, capped; forget resets', async (t) => {
  const q = new WorkQueue(10, 50)
  const delays: number[] = []
  for (let i = 0; i < 5; i++) delays.push(q.addRateLimited('a'))
  t.strictSame(delays, [10, 20, 40, 50, 50], 'doubling up to the cap')
  t.equal(q.addRateLimited('b'), 10, 'per name')
  q.forget('a')
  t.equal(q.addRateLimited('a'), 10, 'forget resets')
  t.equal(q.addRateLimited('a'), 20)
  q.shutdown()
})

t.test('default backoff: 1s doubling to 5 minutes', async (t) => {
  const q = new WorkQueue()
  const delays = Array.from({ length: 11 }, () => q.addRateLimited('x'))
  t.strictSame(delays, [1000, 2000, 4000, 8000, 16000, 32000, 64000, 128000, 256000, 300000, 300000])
  q.shutdown()
})

t.test('a rate-limited name arrives after its delay', async (t) => {
  const q = new WorkQueue(40, 1000)
  const started = Date.now()
  t.equal(q.addRateLimited('a'), 40)
  t.equal(q.length, 0, 'not queued right away')
  t.equal(await nextWithin(q, 1000), 'a')
  t.ok(Date.now() - started >= 35, `waited the delay (${Date.now() - started} ms)`)
})

t.test('addAfter: one timer per name', async (t) => {
  const q = new WorkQueue()
  q.addAfter('a', 20)
  q.addAfter('a', 20)
  await until(
    'a to be queued',
    5_000,
    async () => q.length,
    (n) => n > 0,
  )
  // Past both timers' 20 ms: still once.
  const length = await consistently(
    'a queued once',
    200,
    async () => q.length,
    (n) => n === 1,
  )
  t.equal(length, 1, 'queued once')
  t.equal(await nextWithin(q, 20), 'a')
})

t.test('shutdown cancels pending timers', async (t) => {
  const q = new WorkQueue(10, 10)
  q.addRateLimited('a')
  q.addAfter('b', 10)
  q.shutdown()
  // Well past the timers' 10 ms, checked all along.
  const length = await consistently(
    'nothing to arrive after shutdown',
    200,
    async () => q.length,
    (n) => n === 0,
  )
  t.equal(length, 0, 'nothing arrived')
})

t.test('two workers waiting at once are both served', async (t) => {
  const q = new WorkQueue()
  const first = nextWithin(q, 200)
  const second = nextWithin(q, 200)
  // A turn of the event loop between the steps: each waiter is served before the next add.
  await nextTurn()
  q.add('a')
  await nextTurn()
  q.add('b')
  const got = (await Promise.all([first, second])).sort()
  t.strictSame(got, ['a', 'b'], 'each waiting worker gets a name', {})
})

t.test('waiting does not pile up abort listeners', async (t) => {
  const q = new WorkQueue()
  const ac = new AbortController()
  for (let i = 0; i < 15; i++) {
    const pending = q.next(ac.signal)
    await nextTurn()
    q.add(`n${i}`)
    t.equal(await pending, `n${i}`)
    q.done(`n${i}`)
  }
  t.ok(
    getEventListeners(ac.signal, 'abort').length <= 1,
    `abort listeners left on the signal: ${getEventListeners(ac.signal, 'abort').length}`,
    {},
  )
  ac.abort()
})
