/** src/duration.ts: every format crd-migrator writes a duration in, from milliseconds. */
import t, { type Test } from 'tap'
import { clockDuration, estimateDuration, flagDuration, fullDuration, tenthsOfSeconds, wholeSeconds } from '../../src/duration.js'

type Rows = Array<[number, string, string?]>

const table = (t: Test, format: (ms: number) => string, rows: Rows) => {
  for (const [ms, text, why] of rows) t.equal(format(ms), text, why ?? `${ms} ms`)
}

t.test('wholeSeconds: a limit or a wait in a message', async (t) =>
  table(t, wholeSeconds, [
    [0, '0s'],
    [1_499, '1s'],
    [1_500, '2s'],
    [30_000, '30s'],
    [600_000, '600s', 'no minutes: a limit is said as it is configured'],
  ]),
)

t.test('tenthsOfSeconds: how long a run took', async (t) =>
  table(t, tenthsOfSeconds, [
    [0, '0.0s'],
    [1_234, '1.2s'],
    [12_345, '12.3s'],
    [125_000, '125.0s'],
  ]),
)

t.test('clockDuration: a progress line', async (t) =>
  table(t, clockDuration, [
    [0, '0s'],
    [7_400, '7s'],
    [59_400, '59s'],
    [59_600, '1m00s', 'rounded before it is split'],
    [60_000, '1m00s'],
    [125_000, '2m05s'],
    [3_599_000, '59m59s'],
    [3_720_000, '1h02m'],
  ]),
)

t.test('fullDuration: an ETA, every unit down to seconds', async (t) =>
  table(t, fullDuration, [
    [0, '0s'],
    [59_000, '59s'],
    [59_600, '1m0s', 'never 60s'],
    [75_000, '1m15s'],
    [119_500, '2m0s', 'never 1m60s'],
    [3_600_000, '1h0m0s'],
    [3_700_000, '1h1m40s'],
  ]),
)

t.test("estimateDuration: plan's estimates", async (t) =>
  table(t, estimateDuration, [
    [0, '0 s'],
    [8_240, '8.2 s'],
    [59_940, '59.9 s'],
    [59_960, '1 min 0 s'],
    [250_000, '4 min 10 s'],
    [3_900_000, '1 h 5 min'],
    [7_199_000, '2 h 0 min', 'never 1 h 60 min'],
  ]),
)

t.test('flagDuration: a flag value said back', async (t) =>
  table(t, flagDuration, [
    [5_000, '5s'],
    [1_500, '1500ms'],
    [0, '0s'],
  ]),
)
