/**
 * A plugin applied to the app itself, not a child context, so its parsers, handlers and hooks
 * cover every route and the 404s: fastify-plugin's hidden property (Fastify Reference/Plugins.md, "Handle the scope").
 */
import type { FastifyPluginAsync, FastifyPluginOptions } from 'fastify'

export function rootScoped<Options extends FastifyPluginOptions>(plugin: FastifyPluginAsync<Options>): FastifyPluginAsync<Options> {
  return Object.assign(plugin, { [Symbol.for('skip-override')]: true })
}
