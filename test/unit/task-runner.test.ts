import t from 'tap'
import { TaskRunner } from '../../src/migrator/task-runner.js'

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

t.test('qps: at most that many started in any one-second window', async (t) => {
  const runner = new TaskRunner(100, 5)
  const started = performance.now()
  const starts: number[] = []
  for (let i = 0; i < 12; i++)
    runner.add(async () => {
      starts.push(performance.now() - started)
    })
  t.equal(starts.length, 5, 'five at once')
  await runner.whenIdle()
  while (starts.length < 12) await new Promise((r) => setTimeout(r, 50))
  // Lower bounds only: a slow machine starts later, never earlier.
  t.ok(starts[5]! >= 990, `the sixth waited for the next window (${Math.round(starts[5]!)} ms)`)
  t.ok(starts[10]! >= 1990, `the eleventh for the one after (${Math.round(starts[10]!)} ms)`)
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
