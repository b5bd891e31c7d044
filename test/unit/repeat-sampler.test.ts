import t from 'tap'
import { RepeatSampler } from '../../src/webhook/repeat-sampler.js'

t.test('the first of a kind is logged, repeats within the window are counted and reported with the next logged one', async (t) => {
  let now = 0
  const sampler = new RepeatSampler(10_000, 8, () => now)
  const steps: Array<[number, string, number | undefined]> = [
    [0, 'a', 0], // first of its kind
    [1, 'a', undefined], // repeats: left out
    [5_000, 'a', undefined],
    [9_999, 'a', undefined],
    [9_999, 'b', 0], // another kind is its own
    [10_000, 'a', 3], // the window has passed: logged, with the three left out
    [10_001, 'a', undefined],
    [30_000, 'a', 1],
    [30_000, 'b', 0], // b's window passed with no repeats
  ]
  for (const [at, key, expected] of steps) {
    now = at
    t.equal(sampler.admit(key), expected, `${key} at ${at} ms`)
  }
})

t.test('kinds are bounded: old ones are forgotten first, all of them when every kind is recent', async (t) => {
  let now = 0
  const sampler = new RepeatSampler(1_000, 3, () => now)
  sampler.admit('a')
  sampler.admit('b')
  now = 2_000
  sampler.admit('c')
  t.equal(sampler.size, 3)
  sampler.admit('d') // full: a and b are past their window
  t.equal(sampler.size, 2)
  t.equal(sampler.admit('c'), undefined, 'c is still remembered')
  sampler.admit('e')
  t.equal(sampler.size, 3)
  sampler.admit('f') // full and every kind recent: start over
  t.equal(sampler.size, 1)
  t.equal(sampler.admit('c'), 0, 'c was forgotten: logged again')
})
