/**
 * Issue 44, item 8: SECURITY.md once said the webhook's idle keep-alive was 120 s while
 * the code and docs/webhook.md said 95 s. The figure comes from one place, the default
 * of `webhook.timeouts.keepAliveSeconds`; every document that names it must say that.
 */
import { readFileSync } from 'node:fs'
import t from 'tap'
import { CONFIG_DEFAULTS } from '../../src/config/schema.js'

const root = new URL('../../', import.meta.url)
const seconds = CONFIG_DEFAULTS.webhook.timeouts.keepAliveSeconds

/** Every figure a page gives for the keep-alive: "keep-alive 95 s" (across a line break too) or "keepAliveSeconds` 95". */
function keepAliveFigures(text: string): number[] {
  const prose = [...text.matchAll(/keep-alive\s+(\d+(?:\.\d+)?)\s*s\b/gi)].map((m) => Number(m[1]))
  const setting = [...text.matchAll(/keepAliveSeconds`?\s*(?:\|\s*`?)?(\d+(?:\.\d+)?)/g)].map((m) => Number(m[1]))
  return [...prose, ...setting]
}

t.test('the code has one keep-alive figure', async (t) => {
  t.type(seconds, 'number')
  t.ok(seconds > 90, `${seconds} s: longer than the API server's idle timeout (Go's 90 s)`)
})

for (const page of ['SECURITY.md', 'docs/webhook.md', 'docs/configuration.md', 'docs/reference/configuration.md']) {
  t.test(`${page} states the keep-alive the code uses (${seconds} s)`, async (t) => {
    const figures = keepAliveFigures(readFileSync(new URL(page, root), 'utf8'))
    t.ok(figures.length > 0, `${page} names the keep-alive`)
    t.same(
      figures,
      figures.map(() => seconds),
      `every figure is ${seconds}: ${figures.join(', ')}`,
    )
  })
}
