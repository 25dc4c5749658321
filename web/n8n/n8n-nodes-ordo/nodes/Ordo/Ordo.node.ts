import type {
	IDataObject,
	IExecuteFunctions,
	IHttpRequestMethods,
	INodeExecutionData,
	INodeType,
	INodeTypeDescription,
	JsonObject,
} from 'n8n-workflow';
import { NodeApiError, NodeConnectionTypes, NodeOperationError } from 'n8n-workflow';

import { leaseFields, messageFields, operations, resources } from './description';

// stableMessageId is the message_id a send takes when none is given: the
// same for a retry of the node in one execution (Retry On Fail), so ordo
// accepts the message once and answers the retry as a duplicate; distinct
// for every item, every run of the node (a loop) and every node.
export function stableMessageId(
	executionId: string,
	nodeId: string,
	runIndex: number,
	itemIndex: number,
): string {
	return `n8n-${executionId}-${nodeId.replace(/[^A-Za-z0-9]/g, '').slice(0, 12)}-${runIndex}-${itemIndex}`;
}

// parseJson reads a JSON parameter, which n8n gives as text or already parsed.
function parseJson(
	this: IExecuteFunctions,
	value: unknown,
	what: string,
	itemIndex: number,
): unknown {
	if (typeof value !== 'string') {
		return value;
	}
	try {
		return JSON.parse(value);
	} catch {
		throw new NodeOperationError(this.getNode(), `${what} is not valid JSON`, { itemIndex });
	}
}

// buildMessage is the WhatsApp message of a Send: its type and that type's
// object, as ordo (and the Cloud API) take it.
function buildMessage(this: IExecuteFunctions, i: number): IDataObject {
	const type = this.getNodeParameter('messageType', i) as string;
	switch (type) {
		case 'text':
			return {
				type: 'text',
				text: {
					body: this.getNodeParameter('text', i) as string,
					preview_url: this.getNodeParameter('previewUrl', i, false) as boolean,
				},
			};
		case 'template': {
			const components = parseJson.call(
				this,
				this.getNodeParameter('components', i, '[]'),
				'Components',
				i,
			);
			const template: IDataObject = {
				name: this.getNodeParameter('templateName', i) as string,
				language: { code: this.getNodeParameter('languageCode', i) as string },
			};
			if (Array.isArray(components) && components.length > 0) {
				template.components = components as IDataObject[];
			}
			return { type: 'template', template };
		}
		case 'media': {
			const mediaType = this.getNodeParameter('mediaType', i) as string;
			const source = (this.getNodeParameter('media', i) as string).trim();
			const media: IDataObject = /^https?:\/\//i.test(source) ? { link: source } : { id: source };
			const caption = this.getNodeParameter('caption', i, '') as string;
			if (caption && mediaType !== 'audio' && mediaType !== 'sticker') {
				media.caption = caption;
			}
			const filename = this.getNodeParameter('filename', i, '') as string;
			if (filename && mediaType === 'document') {
				media.filename = filename;
			}
			return { type: mediaType, [mediaType]: media };
		}
		case 'interactive':
			return {
				type: 'interactive',
				interactive: parseJson.call(
					this,
					this.getNodeParameter('interactive', i),
					'Interactive',
					i,
				) as IDataObject,
			};
	}
	throw new NodeOperationError(this.getNode(), `Unknown message type "${type}"`, { itemIndex: i });
}

// readReplies takes the replies of a Post Replies: an array of messages, or
// {"replies": [...]} as a sync answer would be.
function readReplies(this: IExecuteFunctions, i: number): IDataObject[] {
	const value = parseJson.call(this, this.getNodeParameter('replies', i), 'Replies', i);
	const replies = Array.isArray(value) ? value : (value as IDataObject)?.replies;
	if (!Array.isArray(replies)) {
		throw new NodeOperationError(
			this.getNode(),
			'Replies must be an array of WhatsApp messages, or {"replies": [...]}',
			{
				itemIndex: i,
			},
		);
	}
	return replies as IDataObject[];
}

export class Ordo implements INodeType {
	description: INodeTypeDescription = {
		displayName: 'Ordo',
		name: 'ordo',
		icon: { light: 'file:ordo.svg', dark: 'file:ordo.dark.svg' },
		group: ['output'],
		version: 1,
		subtitle: '={{$parameter["operation"] + ": " + $parameter["resource"]}}',
		description:
			'Send WhatsApp messages through ordo exactly once and in order, post async replies, take leases',
		defaults: {
			name: 'Ordo',
		},
		inputs: [NodeConnectionTypes.Main],
		outputs: [NodeConnectionTypes.Main],
		usableAsTool: true,
		credentials: [
			{
				name: 'ordoApi',
				required: true,
			},
		],
		properties: [resources, ...operations, ...messageFields, ...leaseFields],
	};

	async execute(this: IExecuteFunctions): Promise<INodeExecutionData[][]> {
		const items = this.getInputData();
		const out: INodeExecutionData[] = [];
		const credentials = await this.getCredentials('ordoApi');
		const base = String(credentials.baseUrl).replace(/\/+$/, '') + '/v1';

		// call makes one ordo request; ok lists the statuses that are answers
		// rather than errors (409 for a lease held by another).
		const call = async (
			i: number,
			method: IHttpRequestMethods,
			path: string,
			body?: IDataObject,
			ok: number[] = [],
		): Promise<{ statusCode: number; body: IDataObject }> => {
			const res = (await this.helpers.httpRequestWithAuthentication.call(this, 'ordoApi', {
				method,
				url: base + path,
				body,
				json: true,
				returnFullResponse: true,
				ignoreHttpStatusErrors: true,
			})) as { statusCode: number; body: IDataObject };
			if (res.statusCode >= 400 && !ok.includes(res.statusCode)) {
				const err = (res.body?.error ?? {}) as IDataObject;
				throw new NodeApiError(this.getNode(), (res.body ?? {}) as JsonObject, {
					itemIndex: i,
					httpCode: String(res.statusCode),
					message: err.message ? `ordo: ${String(err.message)}` : `ordo answered ${res.statusCode}`,
					description: err.code ? String(err.code) : undefined,
				});
			}
			return res;
		};

		for (let i = 0; i < items.length; i++) {
			try {
				const resource = this.getNodeParameter('resource', i) as string;
				const operation = this.getNodeParameter('operation', i) as string;
				let result: IDataObject;
				if (resource === 'message' && operation === 'send') {
					const options = this.getNodeParameter('options', i, {}) as IDataObject;
					const conversationId = this.getNodeParameter('conversationId', i) as string;
					const messageId =
						(options.messageId as string) ||
						stableMessageId(
							this.getExecutionId(),
							this.getNode().id,
							this.getWorkflowDataProxy(i).$thisRunIndex ?? 0,
							i,
						);
					const body: IDataObject = {
						message_id: messageId,
						conversation_id: conversationId,
						direction: 'outbound',
						...buildMessage.call(this, i),
					};
					if (options.to) {
						body.to = options.to;
					}
					result = (await call(i, 'POST', '/messages', body)).body;
				} else if (resource === 'message' && operation === 'get') {
					const id = this.getNodeParameter('messageId', i) as string;
					result = (await call(i, 'GET', '/messages/' + encodeURIComponent(id))).body;
				} else if (resource === 'message' && operation === 'postReplies') {
					const id = this.getNodeParameter('messageId', i) as string;
					const replies = readReplies.call(this, i);
					result = {
						message_id: id,
						replies: replies.length,
						...(
							await call(i, 'POST', '/messages/' + encodeURIComponent(id) + '/replies', { replies })
						).body,
					};
				} else if (resource === 'lease') {
					const key = encodeURIComponent(this.getNodeParameter('key', i) as string);
					if (operation === 'acquire') {
						const ttl = this.getNodeParameter('ttlMs', i) as number;
						const res = await call(i, 'POST', '/leases/' + key, { ttl_ms: ttl }, [409]);
						result = { acquired: res.statusCode < 300, ...res.body };
					} else if (operation === 'renew') {
						const res = await call(
							i,
							'POST',
							'/leases/' + key + '/renew',
							{
								token: this.getNodeParameter('token', i) as number,
								ttl_ms: this.getNodeParameter('ttlMs', i) as number,
							},
							[409],
						);
						result = { renewed: res.statusCode < 300, ...res.body };
					} else {
						const token = this.getNodeParameter('token', i) as number;
						const res = await call(i, 'DELETE', '/leases/' + key + '?token=' + token, undefined, [
							409,
						]);
						result = { released: res.statusCode < 300, ...res.body };
					}
				} else {
					throw new NodeOperationError(this.getNode(), `Unknown operation "${operation}"`, {
						itemIndex: i,
					});
				}
				out.push({ json: result, pairedItem: { item: i } });
			} catch (error) {
				if (this.continueOnFail()) {
					out.push({ json: { error: (error as Error).message }, pairedItem: { item: i } });
					continue;
				}
				throw error;
			}
		}
		return [out];
	}
}
