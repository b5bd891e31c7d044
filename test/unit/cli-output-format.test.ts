import t from 'tap'
import { parse } from 'yaml'
import { ConfigError } from '../../src/errors.js'
import { outputFormat, renderData } from '../../src/cli/output.js'

t.test('-o text|json|yaml, --json as an alias, text by default', async (t) => {
  t.equal(outputFormat({}), 'text')
  t.equal(outputFormat({ json: true }), 'json')
  t.equal(outputFormat({ output: 'yaml' }), 'yaml')
  t.equal(outputFormat({ output: 'yaml', json: true }), 'yaml', '-o wins over --json')
  t.throws(() => outputFormat({ output: 'xml' }), ConfigError)
  t.throws(() => outputFormat({ output: 'xml' }), { message: /--output: expected one of text, json, yaml, got "xml"/ })
})

t.test('json and yaml carry the same data', async (t) => {
  const rows = [{ name: 'widgets.example.com', storage: 'v2', storedVersions: 'v1,v2' }]
  t.same(JSON.parse(renderData(rows, 'json')), rows)
  t.same(parse(renderData(rows, 'yaml')), rows)
})
