/** Process-wide metrics: crd_migrator_build_info (always 1, labels the point) and crd_migrator_leader. */
import { Gauge, type Registry } from 'prom-client'
import { VERSION } from '../version.js'

export const PROCESS_METRIC_NAMES = Object.freeze({
  buildInfo: 'crd_migrator_build_info',
  leader: 'crd_migrator_leader',
})

export type ProcessMetrics = ReturnType<typeof createProcessMetrics>

export function createProcessMetrics(registry: Registry, build = { version: VERSION, nodeVersion: process.version }) {
  const registers = [registry]
  new Gauge({
    name: PROCESS_METRIC_NAMES.buildInfo,
    help: 'Always 1; its labels name the running build: crd-migrator version and Node.js version.',
    labelNames: ['version', 'node_version'] as const,
    registers,
  }).set({ version: build.version, node_version: build.nodeVersion }, 1)
  const leader = new Gauge({
    name: PROCESS_METRIC_NAMES.leader,
    help: 'Whether this replica leads: 1 while it holds the Lease and runs the migration controller (without leader election, while the controller runs), else 0.',
    registers,
  })
  leader.set(0)
  return {
    setLeader: (leading: boolean) => leader.set(leading ? 1 : 0),
  }
}
