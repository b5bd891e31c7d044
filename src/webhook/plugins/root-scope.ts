/**
 * A plugin that works on the app it is registered on instead of a child context: what it
 * sets (content-type parsers, the error and not-found handlers, hooks) applies to every
 * route, the 404 answers included. This is what the fastify-plugin package does, through
 * the hidden property Fastify documents for it (Reference/Plugins.md, "Handle the scope").
 * Plugins that only add their own routes stay encapsulated.
 */
import type { FastifyPluginAsync, FastifyPluginOptions } from 'fastify'

export function rootScoped<Options extends FastifyPluginOptions>(plugin: FastifyPluginAsync<Options>): FastifyPluginAsync<Options> {
  return Object.assign(plugin, { [Symbol.for('skip-override')]: true })
}
