import { Registry } from 'prom-client'
import t from 'tap'
import { createProcessMetrics, PROCESS_METRIC_NAMES } from '../../src/health/process-metrics.js'
import { VERSION } from '../../src/version.js'

t.test('crd_migrator_build_info: 1, labelled with the version and Node.js version', async (t) => {
  const registry = new Registry()
  createProcessMetrics(registry)
  const text = await registry.metrics()
  t.match(text, `# TYPE ${PROCESS_METRIC_NAMES.buildInfo} gauge`)
  t.match(text, `${PROCESS_METRIC_NAMES.buildInfo}{version="${VERSION}",node_version="${process.version}"} 1\n`)
  t.ok(/^\d+\.\d+\.\d+/.test(VERSION), `the package version (${VERSION})`)
})

t.test('crd_migrator_leader: 0 until told, then follows setLeader', async (t) => {
  const registry = new Registry()
  const metrics = createProcessMetrics(registry, { version: '1.2.3', nodeVersion: 'v26.0.0' })
  const leader = async () => (await registry.getSingleMetric(PROCESS_METRIC_NAMES.leader)!.get()).values.map((v) => v.value)
  t.same(await leader(), [0], 'a replica starts as a follower')
  metrics.setLeader(true)
  t.same(await leader(), [1])
  metrics.setLeader(false)
  t.same(await leader(), [0])
  t.match(await registry.metrics(), 'crd_migrator_build_info{version="1.2.3",node_version="v26.0.0"} 1')
})
