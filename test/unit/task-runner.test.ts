import t from 'tap'
import { TaskRunner } from '../../src/migrator/engine/task-runner.js'
import { Watermark } from '../helpers/until.js'

/** A task that waits until released; records its start. */
function gated(log: string[], name: string) {
  let release!: () => void
  const done = new Promise<void>((r) => (release = r))
  return {
    task: async () => {
      log.push(name)
      await done
    },
    release: () => release(),
  }
}

const tick = () => new Promise((r) => setImmediate(r))

t.test('at most `limit` at once, in the order added; a higher limit starts more at once', async (t) => {
  const log: string[] = []
  const runner = new TaskRunner(2, 0)
  const tasks = ['a', 'b', 'c', 'd', 'e'].map((n) => gated(log, n))
  for (const x of tasks) runner.add(x.task)
  t.same(log, ['a', 'b'], 'two started synchronously')
  t.equal(runner.pending, 2)
  t.equal(runner.size, 3)
  tasks[1]!.release()
  await tick()
  t.same(log, ['a', 'b', 'c'], 'the next one when one finished')
  runner.limit = 4
  t.same(log, ['a', 'b', 'c', 'd', 'e'], 'a higher limit starts the waiting ones')
  runner.limit = 0
  t.equal(runner.limit, 1, 'never below 1')
  for (const x of tasks) x.release()
  await runner.whenIdle()
  t.equal(runner.pending, 0)
})

t.test('whenSizeBelow and whenIdle', async (t) => {
  const log: string[] = []
  const runner = new TaskRunner(1, 0)
  await runner.whenIdle() // nothing to do: at once
  const tasks = ['a', 'b', 'c', 'd'].map((n) => gated(log, n))
  for (const x of tasks) runner.add(x.task)
  let below2 = false
  void runner.whenSizeBelow(2).then(() => (below2 = true))
  let idle = false
  void runner.whenIdle().then(() => (idle = true))
  await tick()
  t.notOk(below2, 'three wait')
  tasks[0]!.release()
  await tick()
  await tick()
  t.notOk(below2, 'two wait')
  tasks[1]!.release()
  await tick()
  await tick()
  t.ok(below2, 'one waits')
  t.notOk(idle)
  tasks[2]!.release()
  tasks[3]!.release()
  await runner.whenIdle()
  t.ok(true, 'idle once all finished')
})

/**
 * Start times (ms from now) of `n` tasks added at once to a runner with this qps. The runner's
 * clock stands still while they are added: how many start at once is then the burst alone, not
 * the burst plus what a slow (loaded) machine's adding time refilled.
 */
async function startTimes(qps: number, n: number): Promise<{ atOnce: number; starts: number[] }> {
  const started = performance.now()
  let adding = true
  const runner = new TaskRunner(1000, qps, () => (adding ? started : performance.now()))
  const starts: number[] = []
  const startedCount = new Watermark()
  for (let i = 0; i < n; i++)
    runner.add(async () => {
      starts.push(performance.now() - started)
      startedCount.add()
    })
  const atOnce = starts.length
  adding = false
  await runner.whenIdle()
  await startedCount.reached(n)
  return { atOnce, starts }
}

t.test('qps: a steady rate from a token bucket, bursts of a tenth of a second at most', async (t) => {
  // 5/s: a burst of one (never less), then one every 200 ms. Lower bounds only: a slow
  // machine starts later, never earlier (timers may fire a millisecond early).
  const slow = await startTimes(5, 8)
  t.equal(slow.atOnce, 1, 'one at once')
  for (let k = 1; k < 8; k++)
    t.ok(slow.starts[k]! >= k * 200 - 2, `start ${k + 1} at ${Math.round(slow.starts[k]!)} ms, not before ${k * 200}`)
  t.ok(slow.starts.filter((ms) => ms < 950).length <= 5, 'at most five in the first 950 ms')

  // 100/s: ten at once, then one every 10 ms; not a second's worth at once.
  const fast = await startTimes(100, 40)
  t.equal(fast.atOnce, 10, 'a tenth of a second of starts at once')
  t.ok(fast.starts[39]! >= 300 - 2, `the 40th waited for 30 more tokens (${Math.round(fast.starts[39]!)} ms)`)

  // A fraction per second is a rate too: 2.5/s is one every 400 ms.
  const fraction = await startTimes(2.5, 3)
  t.equal(fraction.atOnce, 1)
  t.ok(fraction.starts[2]! >= 800 - 2, `the third at ${Math.round(fraction.starts[2]!)} ms`)
})

t.test('qps with an injected clock: tokens come back with time, up to the burst', async (t) => {
  let clock = 0
  const runner = new TaskRunner(1000, 50, () => clock)
  const log: string[] = []
  const gates = Array.from({ length: 12 }, (_, i) => gated(log, `t${i}`))
  for (const g of gates.slice(0, 8)) runner.add(g.task)
  t.equal(log.length, 5, 'burst of 5 (a tenth of 50/s)')
  clock += 40 // two tokens back
  runner.add(gates[8]!.task)
  t.equal(log.length, 7, 'two more after 40 ms')
  clock += 10_000 // a long pause refills to the burst, not beyond
  for (const g of gates.slice(9)) runner.add(g.task)
  t.equal(log.length, 12, 'the five waiting start: the bucket held five, not 500')
  for (const g of gates) g.release()
  await runner.whenIdle()
})

t.test('many tasks: the queue is compacted and nothing is lost', async (t) => {
  const runner = new TaskRunner(8, 0)
  let done = 0
  for (let i = 0; i < 5000; i++)
    runner.add(async () => {
      await tick()
      done++
    })
  await runner.whenIdle()
  t.equal(done, 5000)
  t.equal(runner.size, 0)
})
