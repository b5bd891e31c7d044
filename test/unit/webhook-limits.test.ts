import t from 'tap'
import { checkJsonShape, jsonShapeLimits, MAX_JSON_DEPTH, truncateForLog, truncateListForLog } from '../../src/webhook/limits.js'

const UNLIMITED = { maxDepth: Infinity, maxContainers: Infinity }
const shape = (text: string, limits: Parameters<typeof checkJsonShape>[1]) => checkJsonShape(Buffer.from(text), limits)

/** Depth and number of objects/arrays of a parsed value, walked without recursion. */
function shapeOf(value: unknown): { depth: number; containers: number } {
  let depth = 0
  let containers = 0
  const stack: Array<[unknown, number]> = [[value, 1]]
  while (stack.length > 0) {
    const [v, d] = stack.pop()!
    if (typeof v !== 'object' || v === null) continue
    containers++
    depth = Math.max(depth, d)
    for (const child of Object.values(v)) stack.push([child, d + 1])
  }
  return { depth, containers }
}

t.test('the default limits', async (t) => {
  t.same(jsonShapeLimits(3 * 1024 * 1024), { maxDepth: MAX_JSON_DEPTH, maxContainers: 262_144 })
  t.equal(jsonShapeLimits(1024).maxContainers, 1024, 'never fewer than 1024 objects/arrays')
})

t.test('exact on valid JSON: strings, escapes, brackets and UTF-8 inside strings', async (t) => {
  let seed = 7
  const random = () => (seed = (seed * 1103515245 + 12345) % 2 ** 31) / 2 ** 31
  const nasty = ['a"b', '\\', '\\\\"', '[', '{', ']}', '\\"[{', '"', '\u2028', '🦄', '']
  const gen = (d: number): unknown => {
    const r = random()
    if (d > 12 || r < 0.3) return r < 0.15 ? nasty[Math.floor(random() * nasty.length)]! + '\\'.repeat(Math.floor(random() * 3)) : 1
    const n = Math.floor(random() * 4)
    if (r < 0.65) return Array.from({ length: n }, () => gen(d + 1))
    return Object.fromEntries(Array.from({ length: n }, (_, i) => [`${nasty[i % nasty.length]}${i}`, gen(d + 1)]))
  }
  let checked = 0
  for (let i = 0; i < 2000; i++) {
    const value = gen(0)
    const text = JSON.stringify(value, null, i % 2 ? 1 : undefined)
    const { depth, containers } = shapeOf(value)
    const ok = shape(text, { maxDepth: depth, maxContainers: containers }) === undefined
    const deeper = depth === 0 || shape(text, { maxDepth: depth - 1, maxContainers: Infinity })?.limit === 'depth'
    const more = containers === 0 || shape(text, { maxDepth: Infinity, maxContainers: containers - 1 })?.limit === 'containers'
    if (!ok || !deeper || !more) {
      t.fail(`wrong count for ${text}`, { depth, containers })
      break
    }
    checked++
  }
  t.equal(checked, 2000, 'depth and count exact for 2,000 generated values')
})

t.test('stops at the first limit crossed, and reports which', async (t) => {
  t.same(shape('['.repeat(10_000_000), { maxDepth: 512, maxContainers: Infinity }), { limit: 'depth', max: 512 })
  t.same(shape('[[],[],[],[]]', { maxDepth: 512, maxContainers: 4 }), { limit: 'containers', max: 4 })
  t.equal(shape('[[],[],[]]', { maxDepth: 2, maxContainers: 4 }), undefined)
  t.equal(shape(`"${'['.repeat(1000)}`, { maxDepth: 1, maxContainers: 1 }), undefined, 'an unterminated string is left to JSON.parse')
  t.equal(shape('', UNLIMITED), undefined)
})

t.test('truncateForLog', async (t) => {
  t.equal(truncateForLog('short'), 'short')
  t.equal(truncateForLog('x'.repeat(256)), 'x'.repeat(256))
  t.equal(truncateForLog('x'.repeat(1000)), `${'x'.repeat(256)}… (1000 characters)`)
  t.equal(truncateForLog('abcdef', 3), 'abc… (6 characters)')
  // '🦄' is two UTF-16 units: a cut between them would leave half a character.
  t.equal(truncateForLog('ab🦄cd', 3), 'ab… (6 characters)')
  t.same(truncateListForLog(['a', 'b', 'c'], 2, 10), ['a', 'b', '… (1 more)'])
  t.same(truncateListForLog(['a'.repeat(20)], 2, 10), [`${'a'.repeat(10)}… (20 characters)`])
  t.same(truncateListForLog([]), [])
})
