import { createHmac, timingSafeEqual } from 'crypto';
import type {
	ICredentialDataDecryptedObject,
	ICredentialsDecrypted,
	ICredentialTestFunctions,
	IDataObject,
	INodeCredentialTestResult,
	INodeType,
	INodeTypeDescription,
	IWebhookFunctions,
	IWebhookResponseData,
} from 'n8n-workflow';
import { NodeConnectionTypes } from 'n8n-workflow';

// signature is ordo's X-Ordo-Signature for body under secret.
export function signature(secret: string, body: Buffer): string {
	return 'sha256=' + createHmac('sha256', secret).update(body).digest('hex');
}

// signatureMatches compares in constant time: a mismatch's position tells
// a caller nothing.
export function signatureMatches(
	secret: string,
	body: Buffer,
	header: string | undefined,
): boolean {
	if (!header) {
		return false;
	}
	const want = Buffer.from(signature(secret, body));
	const got = Buffer.from(header);
	return got.length === want.length && timingSafeEqual(got, want);
}

export class OrdoTrigger implements INodeType {
	description: INodeTypeDescription = {
		displayName: 'Ordo Trigger',
		name: 'ordoTrigger',
		icon: { light: 'file:ordo.svg', dark: 'file:ordo.dark.svg' },
		group: ['trigger'],
		version: 1,
		subtitle: '={{"respond: " + $parameter["respond"]}}',
		description:
			"Be an ordo tenant's handler: receives each inbound message, checks ordo's signature, and answers with the replies",
		defaults: {
			name: 'Ordo Trigger',
		},
		inputs: [],
		outputs: [NodeConnectionTypes.Main],
		usableAsTool: true,
		credentials: [
			{
				name: 'ordoHandlerApi',
				required: true,
				testedBy: 'ordoHandlerSecret',
			},
		],
		webhooks: [
			{
				name: 'default',
				httpMethod: 'POST',
				path: '={{$parameter["path"]}}',
				isFullPath: true,
				responseMode: '={{$parameter["respond"]}}',
				responseData: '={{$parameter["respond"] === "lastNode" ? "allEntries" : undefined}}',
				responseCode: '={{$parameter["respond"] === "onReceived" ? 202 : 200}}',
			},
		],
		properties: [
			{
				displayName: 'Path',
				name: 'path',
				type: 'string',
				default: 'ordo',
				required: true,
				placeholder: 'ordo-acme',
				description:
					"The webhook's path: the tenant's handler_url is n8n's URL + /webhook/ + this path",
			},
			{
				displayName: 'Respond',
				name: 'respond',
				type: 'options',
				default: 'responseNode',
				options: [
					{
						name: "Using 'Respond to Webhook' Node (Sync)",
						value: 'responseNode',
						description:
							'A Respond to Webhook node answers {"replies": [...]}, n8n items holding replies, or message items',
					},
					{
						name: 'When Last Node Finishes (Sync)',
						value: 'lastNode',
						description:
							'The last node\'s items are the answer: each {"replies": [...]} or one WhatsApp message',
					},
					{
						name: 'Immediately (Async)',
						value: 'onReceived',
						description:
							"Answer 202 at once; the workflow posts its replies with the Ordo node's Post Replies",
					},
				],
				description:
					"How ordo gets the replies. Sync: in the answer, before the conversation's next message. Async: posted later.",
			},
			{
				displayName:
					"Sync: ordo waits for the answer up to the tenant's handler timeout (ordo tenant update --handler-timeout). A workflow that can take longer is better async.",
				name: 'notice',
				type: 'notice',
				default: '',
				displayOptions: { show: { respond: ['responseNode', 'lastNode'] } },
			},
		],
	};

	methods = {
		credentialTest: {
			// ordo has no endpoint that checks a handler secret (only ordo's own
			// calls carry it): this checks its shape, a hex string as ordo makes.
			async ordoHandlerSecret(
				this: ICredentialTestFunctions,
				credential: ICredentialsDecrypted,
			): Promise<INodeCredentialTestResult> {
				const secret = String((credential.data as ICredentialDataDecryptedObject)?.secret ?? '');
				if (!/^[0-9a-f]{32,}$/i.test(secret)) {
					return {
						status: 'Error',
						message: 'A handler secret is the hex string ordo printed for the tenant',
					};
				}
				return { status: 'OK', message: 'The secret has the shape ordo makes' };
			},
		},
	};

	async webhook(this: IWebhookFunctions): Promise<IWebhookResponseData> {
		const req = this.getRequestObject();
		const credentials = await this.getCredentials('ordoHandlerApi');
		if (!req.rawBody) {
			await req.readRawBody();
		}
		// ordo signs the exact bytes it sent; the parsed body is a fallback
		// only for an n8n that kept no raw body.
		const raw: Buffer = req.rawBody ?? Buffer.from(JSON.stringify(req.body ?? {}));
		const header = this.getHeaderData()['x-ordo-signature'];
		if (
			!signatureMatches(String(credentials.secret), raw, Array.isArray(header) ? header[0] : header)
		) {
			const res = this.getResponseObject();
			res.status(401).json({
				error: {
					code: 'bad_signature',
					message:
						"X-Ordo-Signature does not match: is the Ordo Handler credential the tenant's handler secret?",
				},
			});
			return { noWebhookResponse: true };
		}
		let body = req.body as IDataObject;
		if (!body || typeof body !== 'object' || Object.keys(body).length === 0) {
			body = JSON.parse(raw.toString('utf8')) as IDataObject;
		}
		return {
			workflowData: [[{ json: body }]],
		};
	}
}
