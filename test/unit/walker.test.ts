import t from 'tap'
import type { MetadataPage } from '../../src/kube/list-metadata.js'
import type { PartialObjectMetadata } from '../../src/kube/types.js'
import { walkObjects, type Outcome, type WalkProgress } from '../../src/migrator/engine/walker.js'

const item = (name: string, namespace?: string): PartialObjectMetadata => ({ metadata: { name, ...(namespace ? { namespace } : {}) } })

/** Zero-padded names list in key order: k000, k001, ... */
const names = (n: number, prefix = 'k') => Array.from({ length: n }, (_, i) => `${prefix}${String(i).padStart(3, '0')}`)

/** An in-memory list: pages of items, recording how many were pulled and when. */
function pagesOf(
  pageItems: PartialObjectMetadata[][],
  options: { remaining?: Array<number | undefined>; onPull?: (index: number) => void } = {},
) {
  const pulled: number[] = []
  async function* gen(): AsyncGenerator<MetadataPage> {
    for (const [i, items] of pageItems.entries()) {
      pulled.push(i)
      options.onPull?.(i)
      yield { items, remainingItemCount: options.remaining?.[i] }
    }
  }
  return { pages: gen(), pulled }
}

const snapshot = (p: WalkProgress) => ({ ...p, counts: { ...p.counts } })

/**
 * A handler's "work": one turn of the event loop, after every promise callback queued so
 * far, so handlers in flight overlap and the walker's bookkeeping of whatever settled has
 * run. Where a test needs one handler to finish after another, it waits for that one.
 */
const nextTurn = () => new Promise<void>((resolve) => setImmediate(resolve))

/** A promise and the function that resolves it. */
function signal(): { promise: Promise<void>; fire: () => void } {
  let fire!: () => void
  const promise = new Promise<void>((resolve) => (fire = resolve))
  return { promise, fire }
}

t.test('counts per outcome, failures with key, code and message', async (t) => {
  const outcomes: Record<string, Outcome | Error> = {
    'ns-a/a': 'rewritten',
    'ns-a/b': 'current',
    'ns-a/c': 'skipped',
    'ns-b/d': 'gone',
    'ns-b/e': 'conflict',
    'ns-b/f': new Error('admission webhook denied the request'),
    'ns-b/g': 'rewritten',
    'ns-c/h': 'rewritten',
  }
  const items = Object.keys(outcomes).map((k) => item(k.split('/')[1]!, k.split('/')[0]))
  const { pages } = pagesOf([items.slice(0, 3), items.slice(3)])
  const ends: Array<Outcome | 'failed'> = []
  let starts = 0
  const result = await walkObjects(
    pages,
    async (i) => {
      const o = outcomes[`${i.metadata.namespace}/${i.metadata.name}`]!
      if (o instanceof Error) throw o
      return o
    },
    {
      concurrency: 3,
      qps: 0,
      onWriteStart: () => starts++,
      onWriteEnd: (o, seconds) => {
        ends.push(o)
        if (!(seconds >= 0)) throw new Error('bad seconds')
      },
    },
  )

  t.strictSame(result.counts, { seen: 8, rewritten: 3, current: 1, skipped: 1, gone: 1, conflict: 1, failed: 1, resumed: 0 })
  // A failure is reported with its error code; errors that are not ours are CRDM_INTERNAL (real writes throw CRDM_KUBE_API).
  t.strictSame(result.failures, [
    {
      key: 'ns-b/f',
      code: 'CRDM_INTERNAL',
      message: 'admission webhook denied the request',
      error: 'CRDM_INTERNAL: admission webhook denied the request',
    },
  ])
  t.equal(result.checkpoint, 'ns-b/e', 'the checkpoint stops before the failed object ns-b/f')
  t.equal(starts, 8, 'onWriteStart per object')
  t.strictSame(
    [...ends].sort(),
    ['conflict', 'current', 'failed', 'gone', 'rewritten', 'rewritten', 'rewritten', 'skipped'],
    'onWriteEnd per object',
  )
})

t.test('cluster-scoped keys are the bare name', async (t) => {
  const { pages } = pagesOf([[item('a'), item('b')]])
  const seen: string[] = []
  const result = await walkObjects(
    pages,
    async (i) => {
      seen.push(i.metadata.name)
      return 'current'
    },
    { concurrency: 1, qps: 0 },
  )
  t.strictSame(seen, ['a', 'b'], 'list order with concurrency 1')
  t.equal(result.checkpoint, 'b')
})

t.test('an empty list', async (t) => {
  const progress: WalkProgress[] = []
  const result = await walkObjects(pagesOf([]).pages, async () => 'current', {
    concurrency: 4,
    qps: 0,
    onProgress: (p) => progress.push(snapshot(p)),
  })
  t.strictSame(result, {
    counts: { seen: 0, rewritten: 0, current: 0, skipped: 0, gone: 0, conflict: 0, failed: 0, resumed: 0 },
    failures: [],
    checkpoint: undefined,
  })
  t.equal(progress.at(-1)?.total, 0, 'final total 0')
})

t.test('non-Error throws are recorded as strings', async (t) => {
  const { pages } = pagesOf([[item('a')]])
  const result = await walkObjects(
    pages,
    async () => {
      throw 'plain string'
    },
    { concurrency: 1, qps: 0 },
  )
  t.strictSame(result.failures, [{ key: 'a', code: 'CRDM_INTERNAL', message: 'plain string', error: 'CRDM_INTERNAL: plain string' }])
  t.equal(result.counts.failed, 1)
})

t.test('recorded failures are capped, all are counted', async (t) => {
  const { pages } = pagesOf([names(10).map((n) => item(n))])
  const result = await walkObjects(
    pages,
    async (i) => {
      throw new Error(`no ${i.metadata.name}`)
    },
    { concurrency: 1, qps: 0, maxRecordedFailures: 3 },
  )
  t.equal(result.counts.failed, 10, 'all counted')
  t.strictSame(
    result.failures,
    [
      { key: 'k000', code: 'CRDM_INTERNAL', message: 'no k000', error: 'CRDM_INTERNAL: no k000' },
      { key: 'k001', code: 'CRDM_INTERNAL', message: 'no k001', error: 'CRDM_INTERNAL: no k001' },
      { key: 'k002', code: 'CRDM_INTERNAL', message: 'no k002', error: 'CRDM_INTERNAL: no k002' },
    ],
    'the first three kept',
  )
})

t.test('default failure cap is 100', async (t) => {
  const { pages } = pagesOf([names(120).map((n) => item(n))])
  const result = await walkObjects(
    pages,
    async () => {
      throw new Error('x')
    },
    { concurrency: 8, qps: 0 },
  )
  t.equal(result.counts.failed, 120)
  t.equal(result.failures.length, 100)
})

t.test('concurrency is never exceeded', async (t) => {
  const { pages } = pagesOf([names(30).map((n) => item(n)), names(30, 'm').map((n) => item(n))])
  let inFlight = 0
  let peak = 0
  let overReported = false
  const result = await walkObjects(
    pages,
    async () => {
      inFlight++
      peak = Math.max(peak, inFlight)
      await nextTurn()
      inFlight--
      return 'rewritten'
    },
    {
      concurrency: 4,
      qps: 0,
      onProgress: (p) => {
        if (p.inFlight > 4) overReported = true
      },
    },
  )
  t.equal(result.counts.rewritten, 60)
  t.ok(peak <= 4, `peak ${peak} <= 4`)
  t.ok(peak >= 2, `the concurrency is used (peak ${peak})`)
  t.notOk(overReported, 'progress never reports more than 4 in flight')
})

t.test('concurrency below 1 runs one at a time', async (t) => {
  let inFlight = 0
  let peak = 0
  const result = await walkObjects(
    pagesOf([names(5).map((n) => item(n))]).pages,
    async () => {
      peak = Math.max(peak, ++inFlight)
      await nextTurn()
      inFlight--
      return 'current'
    },
    { concurrency: 0, qps: 0 },
  )
  t.equal(result.counts.current, 5)
  t.equal(peak, 1)
})

t.test('qps limits the start rate', async (t) => {
  const starts: number[] = []
  const started = Date.now()
  await walkObjects(
    pagesOf([names(25).map((n) => item(n))]).pages,
    async () => {
      starts.push(Date.now() - started)
      return 'current'
    },
    { concurrency: 25, qps: 20 },
  )
  t.equal(starts.length, 25)
  t.ok(starts.filter((s) => s < 900).length <= 20, `at most 20 starts in the first second (${starts.filter((s) => s < 900).length})`)
  t.ok(starts.at(-1)! >= 900, 'the rest waited for the next interval')
})

t.test('resumeAfter skips keys at or before the checkpoint', async (t) => {
  const handled: string[] = []
  const { pages } = pagesOf([
    [item('a', 'ns'), item('b', 'ns'), item('c', 'ns')],
    [item('d', 'ns'), item('e', 'ns'), item('f', 'ns')],
  ])
  const result = await walkObjects(
    pages,
    async (i) => {
      handled.push(i.metadata.name)
      return 'rewritten'
    },
    { concurrency: 2, qps: 0, resumeAfter: 'ns/c' },
  )
  t.strictSame(handled.sort(), ['d', 'e', 'f'], 'only keys after the checkpoint')
  t.equal(result.counts.seen, 6)
  t.equal(result.counts.resumed, 3)
  t.equal(result.counts.rewritten, 3)
  t.equal(result.checkpoint, 'ns/f')
})

t.test('resumeAfter past everything: all resumed, checkpoint moves to the last key', async (t) => {
  const handled: string[] = []
  const result = await walkObjects(
    pagesOf([[item('a'), item('b')]]).pages,
    async (i) => {
      handled.push(i.metadata.name)
      return 'rewritten'
    },
    { concurrency: 2, qps: 0, resumeAfter: 'z' },
  )
  t.strictSame(handled, [])
  t.equal(result.counts.resumed, 2)
  t.equal(result.checkpoint, 'b')
})

t.test('resumeAfter with nothing finished keeps the old checkpoint', async (t) => {
  const result = await walkObjects(pagesOf([]).pages, async () => 'rewritten', { concurrency: 2, qps: 0, resumeAfter: 'ns/m' })
  t.equal(result.checkpoint, 'ns/m')
})

t.test('the checkpoint is a low watermark', async (t) => {
  const keys = names(24)
  const unfinished = new Set(keys)
  const violations: string[] = []
  let lagged = false
  const checkpoints: Array<string | undefined> = []
  const onProgress = (p: WalkProgress) => {
    checkpoints.push(p.checkpoint)
    for (const u of unfinished) {
      if (p.checkpoint !== undefined && p.checkpoint >= u) violations.push(`checkpoint ${p.checkpoint} passed unfinished ${u}`)
    }
    // Some key after the checkpoint is finished already: later items overtook earlier ones.
    if (keys.some((k) => !unfinished.has(k) && (p.checkpoint === undefined || k > p.checkpoint))) lagged = true
  }
  const { pages } = pagesOf([keys.slice(0, 12).map((n) => item(n)), keys.slice(12).map((n) => item(n))])
  // Every sixth item finishes only after the five behind it (all six fit in flight at once),
  // so later ones finish first.
  const followersDone = keys.map(() => 0)
  const followersFinished = keys.map(() => signal())
  const result = await walkObjects(
    pages,
    async (i) => {
      const index = keys.indexOf(i.metadata.name)
      const leader = index - (index % 6)
      if (index === leader) await followersFinished[leader]!.promise
      else await nextTurn()
      unfinished.delete(i.metadata.name)
      if (index !== leader && ++followersDone[leader]! === 5) followersFinished[leader]!.fire()
      return 'rewritten'
    },
    { concurrency: 6, qps: 0, onProgress },
  )
  t.strictSame(violations, [], 'the checkpoint never passed an unfinished key')
  t.ok(lagged, 'the checkpoint lagged behind items finished out of order')
  t.equal(result.checkpoint, 'k023', 'all done: the last key')
  const defined = checkpoints.filter((c): c is string => c !== undefined)
  t.strictSame(defined, [...defined].sort(), 'the checkpoint only moves forward')
})

t.test('a failed object holds the checkpoint back', async (t) => {
  // A resumed run skips everything up to the checkpoint. If a failure counted as done, an object
  // that was never rewritten could be skipped after a crash, and storedVersions narrowed anyway.
  const { pages } = pagesOf([[item('a'), item('b'), item('c'), item('d')]])
  const progress: Array<string | undefined> = []
  const result = await walkObjects(
    pages,
    async (i) => {
      if (i.metadata.name === 'b') throw new Error('webhook denied')
      return 'rewritten'
    },
    { concurrency: 1, qps: 0, onProgress: (p) => progress.push(p.checkpoint) },
  )
  t.equal(result.counts.failed, 1)
  t.ok(
    progress.every((c) => c === undefined || c < 'b'),
    `the checkpoint never passes the failed key (saw ${JSON.stringify(progress)})`,
    {},
  )
})

t.test('objects before a failed one still move the checkpoint when they finish after it', async (t) => {
  // c fails at once while a and b are still in flight: the watermark must still reach b.
  const { pages } = pagesOf([[item('a'), item('b'), item('c'), item('d'), item('e')]])
  const cFailed = signal()
  const result = await walkObjects(
    pages,
    async (i) => {
      if (i.metadata.name === 'c') {
        cFailed.fire()
        throw new Error('webhook denied')
      }
      // a and b finish after c's failure is booked (the turn after it was thrown).
      if (i.metadata.name < 'c') await cFailed.promise.then(nextTurn)
      return 'rewritten'
    },
    { concurrency: 3, qps: 0 },
  )
  t.equal(result.counts.failed, 1)
  t.equal(result.counts.rewritten, 4)
  t.equal(result.checkpoint, 'b', 'up to the object before the failed one, never past it')
})

t.test('a second failure before the first moves the stop point back', async (t) => {
  const { pages } = pagesOf([[item('a'), item('b'), item('c'), item('d')]])
  const dFailed = signal()
  const result = await walkObjects(
    pages,
    async (i) => {
      if (i.metadata.name === 'd') {
        dFailed.fire()
        throw new Error('first to fail')
      }
      if (i.metadata.name === 'b') {
        await dFailed.promise.then(nextTurn)
        throw new Error('fails later, but comes first')
      }
      return 'rewritten'
    },
    { concurrency: 4, qps: 0 },
  )
  t.equal(result.counts.failed, 2)
  t.equal(result.checkpoint, 'a')
})

t.test('concurrencyLimit: handlers follow the limit in force, never above the cap', async (t) => {
  const { pages } = pagesOf([names(40).map((n) => item(n)), names(40, 'm').map((n) => item(n))])
  let limit = 2
  let inFlight = 0
  let done = 0
  const peaks = { before: 0, after: 0 }
  const result = await walkObjects(
    pages,
    async () => {
      inFlight++
      const phase = limit === 2 ? 'before' : 'after'
      peaks[phase] = Math.max(peaks[phase], inFlight)
      await nextTurn()
      inFlight--
      if (++done === 25) limit = 50 // above the cap of 6
      return 'rewritten'
    },
    { concurrency: 6, concurrencyLimit: () => limit, qps: 0 },
  )
  t.equal(result.counts.rewritten, 80)
  t.ok(peaks.before <= 2, `at most 2 in flight while the limit is 2 (peak ${peaks.before})`)
  t.equal(peaks.after, 6, 'up to the cap once the limit is above it')
})

t.test('total from remainingItemCount', async (t) => {
  const progress: WalkProgress[] = []
  const { pages } = pagesOf(
    [
      [item('a'), item('b'), item('c')],
      [item('d'), item('e'), item('f')],
      [item('g'), item('h')],
    ],
    { remaining: [5, 2, undefined] },
  )
  const result = await walkObjects(pages, async () => 'current', { concurrency: 2, qps: 0, onProgress: (p) => progress.push(snapshot(p)) })
  t.equal(result.counts.seen, 8)
  t.ok(progress.length > 0)
  t.equal(progress.find((p) => p.counts.seen === 3)?.total, 8, 'after page 1: 3 seen + 5 remaining')
  t.ok(
    progress.every((p) => p.total === 8),
    'the estimate holds throughout',
  )
  t.equal(progress.at(-1)?.total, 8)
})

t.test('total is unknown until the list says, then at least seen', async (t) => {
  const progress: WalkProgress[] = []
  const { pages } = pagesOf([[item('a'), item('b')], [item('c')]])
  await walkObjects(pages, async () => 'current', { concurrency: 1, qps: 0, onProgress: (p) => progress.push(snapshot(p)) })
  t.equal(progress[0]?.total, undefined, 'no remainingItemCount: unknown')
  t.equal(progress.at(-1)?.total, 3, 'the final progress reports what was seen')
})

t.test('the final total is what was seen when the estimate was too high', async (t) => {
  const progress: WalkProgress[] = []
  // The API server said 10 more, but objects were deleted meanwhile: only 2 came.
  const { pages } = pagesOf(
    [
      [item('a'), item('b')],
      [item('c'), item('d')],
    ],
    { remaining: [10, undefined] },
  )
  await walkObjects(pages, async () => 'current', { concurrency: 1, qps: 0, onProgress: (p) => progress.push(snapshot(p)) })
  t.equal(progress.at(-1)?.counts.seen, 4)
  t.equal(progress.at(-1)?.total, 4, 'the last progress says 4 of 4', {})
})

t.test('a 401 aborts the walk', async (t) => {
  const unauthorized = Object.assign(new Error('Unauthorized'), { status: 401 })
  // The first page is larger than the queue's high water mark (64), so the walker is still
  // working through it when the 401 comes.
  const { pages, pulled } = pagesOf([names(100, 'a').map((n) => item(n)), names(100, 'b').map((n) => item(n)), [item('c')]])
  const handled: string[] = []
  await t.rejects(
    walkObjects(
      pages,
      async (i) => {
        handled.push(i.metadata.name)
        await nextTurn()
        if (i.metadata.name === 'a001') throw unauthorized
        return 'rewritten'
      },
      { concurrency: 2, qps: 0 },
    ),
    unauthorized,
    'rejects with the 401',
  )
  t.ok(pulled.length <= 2, `the third page is never pulled (pulled ${pulled.length})`)
  t.strictSame(
    handled.filter((n) => !n.startsWith('a')),
    [],
    'nothing after the first page is handled',
  )
})

t.test('a bare object with status 401 is fatal too', async (t) => {
  const { pages } = pagesOf([[item('a')], [item('b')]])
  await t.rejects(
    walkObjects(
      pages,
      async () => {
        throw { status: 401, message: 'token expired' }
      },
      { concurrency: 1, qps: 0 },
    ),
    { status: 401, message: 'token expired' },
  )
})

t.test('other errors do not abort the walk', async (t) => {
  const { pages } = pagesOf([[item('a'), item('b')]])
  const result = await walkObjects(
    pages,
    async () => {
      throw Object.assign(new Error('Forbidden'), { status: 403 })
    },
    { concurrency: 1, qps: 0 },
  )
  t.equal(result.counts.failed, 2)
})

t.test('after a 401 no further writes are started', async (t) => {
  const { pages } = pagesOf([names(10).map((n) => item(n))])
  let calls = 0
  await t.rejects(
    walkObjects(
      pages,
      async () => {
        calls++
        throw Object.assign(new Error('Unauthorized'), { status: 401 })
      },
      { concurrency: 1, qps: 0 },
    ),
    { status: 401, message: 'Unauthorized' },
  )
  t.equal(calls, 1, `writes after the 401: ${calls - 1}`, {})
})

t.test('an abort signal rejects the walk', async (t) => {
  const ac = new AbortController()
  const { pages } = pagesOf([names(50).map((n) => item(n))])
  let calls = 0
  const walk = walkObjects(
    pages,
    async () => {
      calls++
      if (calls === 3) ac.abort()
      await nextTurn()
      return 'rewritten'
    },
    { concurrency: 1, qps: 0, signal: ac.signal },
  )
  await t.rejects(walk, { name: 'AbortError' })
  t.ok(calls <= 4, `queued work is dropped after the abort (${calls} calls)`)
})

t.test('the next page is not pulled while the queue is full', async (t) => {
  // highWater is max(64, 4 * concurrency) = 64 with concurrency 2: after pulling a page of 100,
  // the walker waits until fewer than 64 wait in the queue.
  let finished = 0
  const finishedAtPull: number[] = []
  const { pages } = pagesOf(
    [0, 1, 2].map((p) => names(100, `p${p}-`).map((n) => item(n))),
    { onPull: () => finishedAtPull.push(finished) },
  )
  const result = await walkObjects(
    pages,
    async () => {
      await nextTurn()
      finished++
      return 'current'
    },
    { concurrency: 2, qps: 0 },
  )
  t.equal(result.counts.current, 300)
  t.equal(finishedAtPull.length, 3)
  t.equal(finishedAtPull[0], 0, 'the first page right away')
  // Pulling page k (0-based) means 100*k items were queued and fewer than 64 of them wait, at most
  // 2 run: at least 100*k - 63 - 2 are finished.
  t.ok(finishedAtPull[1]! >= 100 - 65, `page 2 pulled after ${finishedAtPull[1]} finished (>= 35)`)
  t.ok(finishedAtPull[2]! >= 200 - 65, `page 3 pulled after ${finishedAtPull[2]} finished (>= 135)`)
  t.ok(finishedAtPull[2]! < 200, 'but before the queue ran dry')
})

t.test('skip: objects the predicate rules out are counted skipped without a handler call or a QPS token', async (t) => {
  const all = names(60).map((n) => item(n, 'ns'))
  const { pages } = pagesOf([all.slice(0, 30), all.slice(30)])
  const handled: string[] = []
  let skippedHook = 0
  const started = Date.now()
  const result = await walkObjects(
    pages,
    async (i) => {
      handled.push(i.metadata.name)
      return 'rewritten'
    },
    {
      concurrency: 2,
      qps: 2,
      skip: (i) => i.metadata.name !== 'k010' && i.metadata.name !== 'k050',
      onSkipped: () => skippedHook++,
    },
  )
  t.same(handled.sort(), ['k010', 'k050'], 'only the two objects with work reach the handler')
  t.match(result.counts, { seen: 60, skipped: 58, rewritten: 2, failed: 0 })
  t.equal(skippedHook, 58, 'onSkipped per skipped object')
  t.equal(result.checkpoint, 'ns/k059', 'skipped objects count as finished for the checkpoint')
  t.ok(Date.now() - started < 1500, `not paced at 2 per second over the skipped ones (${Date.now() - started} ms)`)
})

t.test('a stop mid-walk: the writes in flight end first; those the stop cut short are neither done nor failed', async (t) => {
  const ac = new AbortController()
  const { pages } = pagesOf([names(20).map((n) => item(n))])
  const release = signal()
  let started = 0
  let last: WalkProgress | undefined
  const walk = walkObjects(
    pages,
    async (i) => {
      started++
      if (started === 4) ac.abort()
      // k000 and k001 finish after the stop; k002 and k003 are cut short by it.
      if (i.metadata.name <= 'k001') {
        await release.promise
        return 'rewritten'
      }
      await nextTurn()
      throw new DOMException('aborted', 'AbortError')
    },
    { concurrency: 4, qps: 0, signal: ac.signal, onProgress: (p) => (last = p) },
  )
  let rejected = false
  void walk.catch(() => (rejected = true))
  await nextTurn()
  await nextTurn()
  t.notOk(rejected, 'not rejected while writes are in flight')
  release.fire()
  await t.rejects(walk, { name: 'AbortError' })
  t.equal(last?.counts.rewritten, 2, 'the writes that landed after the stop are counted')
  t.equal(last?.counts.failed, 0, 'the ones the stop cut short are not failures')
  t.equal(last?.checkpoint, 'k001', 'the checkpoint covers what is certainly done')
})
