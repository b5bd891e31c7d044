import t from 'tap'
import type { MetadataPage } from '../../src/kube/list-metadata.js'
import type { PartialObjectMetadata } from '../../src/kube/types.js'
import { TokenBucket, WriteBudget } from '../../src/migrator/engine/budget.js'
import { withRetry } from '../../src/migrator/engine/retry.js'
import { TaskRunner } from '../../src/migrator/engine/task-runner.js'
import { walkObjects } from '../../src/migrator/engine/walker.js'
import { until } from '../helpers/until.js'

const nextTurn = () => new Promise<void>((resolve) => setImmediate(resolve))

async function* pagesOf(prefix: string, n: number): AsyncGenerator<MetadataPage> {
  const items: PartialObjectMetadata[] = Array.from({ length: n }, (_, i) => ({
    metadata: { name: `${prefix}${String(i).padStart(4, '0')}` },
  }))
  for (let i = 0; i < items.length; i += 50) yield { items: items.slice(i, i + 50), remainingItemCount: undefined }
}

/** Writes of several walks through one budget: in flight per walk and in all, and the order they finished in. */
function writes(budget: WriteBudget) {
  const inFlight = new Map<string, number>()
  const peak = new Map<string, number>()
  let total = 0
  let peakTotal = 0
  const finished: string[] = []
  const handler = (walk: string) => async () => {
    await withRetry(
      async () => {
        total++
        inFlight.set(walk, (inFlight.get(walk) ?? 0) + 1)
        peakTotal = Math.max(peakTotal, total)
        peak.set(walk, Math.max(peak.get(walk) ?? 0, inFlight.get(walk)!))
        await nextTurn()
        total--
        inFlight.set(walk, inFlight.get(walk)! - 1)
      },
      { maxAttempts: 1, gate: budget.gate },
    )
    finished.push(walk)
    return 'rewritten' as const
  }
  const walk = (name: string, objects: number, cap: number) =>
    walkObjects(pagesOf(name, objects), handler(name), {
      concurrency: cap,
      concurrencyLimit: () => budget.gate.concurrencyLimit,
      qps: 0,
    })
  return { walk, peak, finished, peakTotal: () => peakTotal }
}

t.test('two walks share one limit: never more writes in flight than the budget, each walk at most its own cap', async (t) => {
  const budget = new WriteBudget({ concurrency: 6, qps: 0, adaptive: false })
  const w = writes(budget)
  const [a, b] = await Promise.all([w.walk('a', 300, 4), w.walk('b', 300, 4)])
  t.equal(a.counts.rewritten, 300)
  t.equal(b.counts.rewritten, 300)
  t.equal(w.peakTotal(), 6, 'the two walks together filled the shared limit and never went past it')
  t.ok(w.peak.get('a')! <= 4 && w.peak.get('b')! <= 4, `each walk kept at most its cap of 4 (a ${w.peak.get('a')}, b ${w.peak.get('b')})`)
  t.equal(budget.gate.active, 0, 'every slot given back')
})

t.test('a walk of many objects does not starve a small one started after it', async (t) => {
  const budget = new WriteBudget({ concurrency: 4, qps: 0, adaptive: false })
  const w = writes(budget)
  const big = w.walk('big', 2000, 4)
  // The big walk has filled the limit and has writes queued before the small one starts.
  await until(
    'the big walk is under way',
    5000,
    async () => w.finished.length,
    (n) => n >= 20,
    { everyMs: 1 },
  )
  const bigDone = () => w.finished.filter((x) => x === 'big').length
  const atStart = bigDone()
  const small = w.walk('small', 20, 4)
  await small
  const meanwhile = bigDone() - atStart
  await big
  t.ok(atStart < 1980, `the big walk still had work when the small one started (${atStart} done)`)
  // Served in arrival order, the small walk gets about every other slot: its 20 writes
  // finish while the big one does about as many, far from what it had left.
  t.ok(meanwhile <= 20 + 8, `the big walk did ${meanwhile} writes while the small walk did its 20`)
})

t.test('the gate serves waiters in arrival order and lets nobody jump the queue', async (t) => {
  const budget = new WriteBudget({ concurrency: 1, qps: 0, adaptive: false })
  const gate = budget.gate
  const first = gate.tryAcquire()
  t.not(first, undefined)
  const order: string[] = []
  const waiting = ['w1', 'w2', 'w3'].map((name) =>
    gate.acquire().then((slot) => {
      order.push(name)
      return slot
    }),
  )
  t.equal(gate.waiting, 3)
  t.equal(gate.tryAcquire(), undefined, 'no slot at once while others wait')
  const aborted = new AbortController()
  const late = gate.acquire(aborted.signal)
  aborted.abort()
  await t.rejects(late, { name: 'AbortError' }, 'a waiter that gives up leaves the queue')
  gate.release(first!)
  for (const w of waiting) gate.release(await w)
  t.same(order, ['w1', 'w2', 'w3'])
  t.equal(gate.active, 0)
  t.equal(gate.waiting, 0)
})

t.test('one --qps for several task runners: never more starts than the bucket allows, handed out in turn', async (t) => {
  let now = 0
  // 20 a second: bursts of 2; a token every 50 ms of this clock.
  const bucket = new TokenBucket(20, () => now)
  const starts: string[] = []
  const a = new TaskRunner(10, 0, undefined, bucket)
  const b = new TaskRunner(10, 0, undefined, bucket)
  for (let i = 0; i < 5; i++) a.add(async () => void starts.push('a'))
  for (let i = 0; i < 5; i++) b.add(async () => void starts.push('b'))
  t.same(starts, ['a', 'a'], 'the burst of 2, then nothing while the clock stands still')
  await nextTurn()
  t.same(starts, ['a', 'a'])
  for (let n = 3; n <= 10; n++) {
    now += 50
    await until(
      `start ${n}`,
      5000,
      async () => starts.length,
      (len) => len >= n,
      { everyMs: 5 },
    )
    t.equal(starts.length, n, `one start per 50 ms of the clock (${n})`)
  }
  t.same(starts, ['a', 'a', 'a', 'b', 'a', 'b', 'a', 'b', 'b', 'b'], 'the runners waiting take turns, in the order they queued')
  await Promise.all([a.whenIdle(), b.whenIdle()])
})

t.test("a CRD's own qps applies besides the shared one, the process's only once", async (t) => {
  const budget = new WriteBudget({ concurrency: 4, qps: 100 })
  t.equal(budget.ownQps(100), 0)
  t.equal(budget.ownQps(0), 0)
  t.equal(budget.ownQps(20), 20)
  t.equal(new WriteBudget({ concurrency: 4, qps: 0 }).rate, undefined, 'no bucket without a rate')
})

t.test('TaskRunner.clear drops the tasks not started: a stopped walk does not wait for their starts at qps', async (t) => {
  const runner = new TaskRunner(4, 1)
  let started = 0
  let release!: () => void
  const first = new Promise<void>((resolve) => (release = resolve))
  runner.add(async () => {
    started++
    await first
  })
  for (let i = 0; i < 50; i++)
    runner.add(async () => {
      started++
    })
  t.equal(runner.size, 50, 'at qps 1 the others wait for their start')
  runner.clear()
  t.equal(runner.size, 0, 'dropped')
  release()
  await runner.whenIdle()
  t.equal(started, 1, 'only the task already running ran')
})
