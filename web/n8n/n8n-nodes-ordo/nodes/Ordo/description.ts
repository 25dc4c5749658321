import type { INodeProperties } from 'n8n-workflow';

export const resources: INodeProperties = {
	displayName: 'Resource',
	name: 'resource',
	type: 'options',
	noDataExpression: true,
	options: [
		{ name: 'Lease', value: 'lease' },
		{ name: 'Message', value: 'message' },
	],
	default: 'message',
};

export const operations: INodeProperties[] = [
	{
		displayName: 'Operation',
		name: 'operation',
		type: 'options',
		noDataExpression: true,
		displayOptions: { show: { resource: ['message'] } },
		options: [
			{
				name: 'Get',
				value: 'get',
				description: 'Get a message with its status and steps',
				action: 'Get a message',
			},
			{
				name: 'Post Replies',
				value: 'postReplies',
				description: 'Post the replies to an inbound message whose handler answered async',
				action: 'Post replies to a message',
			},
			{
				name: 'Send',
				value: 'send',
				description: 'Send a WhatsApp message, accepted once and in order per conversation',
				action: 'Send a message',
			},
		],
		default: 'send',
	},
	{
		displayName: 'Operation',
		name: 'operation',
		type: 'options',
		noDataExpression: true,
		displayOptions: { show: { resource: ['lease'] } },
		options: [
			{
				name: 'Acquire',
				value: 'acquire',
				description: 'Take a lease; its fencing token only grows',
				action: 'Acquire a lease',
			},
			{
				name: 'Release',
				value: 'release',
				description: 'Give a lease back with its token',
				action: 'Release a lease',
			},
			{
				name: 'Renew',
				value: 'renew',
				description: 'Lengthen a lease still held with its token',
				action: 'Renew a lease',
			},
		],
		default: 'acquire',
	},
];

const send = { show: { resource: ['message'], operation: ['send'] } };

export const messageFields: INodeProperties[] = [
	{
		displayName: 'Conversation ID',
		name: 'conversationId',
		type: 'string',
		required: true,
		default: '',
		placeholder: '16505551234',
		description:
			"The conversation: for WhatsApp the user's number (wa_ID); messages of one conversation are sent in order",
		displayOptions: send,
	},
	{
		displayName: 'Message Type',
		name: 'messageType',
		type: 'options',
		options: [
			{ name: 'Interactive', value: 'interactive' },
			{ name: 'Media', value: 'media' },
			{ name: 'Template', value: 'template' },
			{ name: 'Text', value: 'text' },
		],
		default: 'text',
		displayOptions: send,
	},
	{
		displayName: 'Text',
		name: 'text',
		type: 'string',
		typeOptions: { rows: 3 },
		required: true,
		default: '',
		displayOptions: { show: { ...send.show, messageType: ['text'] } },
	},
	{
		displayName: 'Preview URL',
		name: 'previewUrl',
		type: 'boolean',
		default: false,
		description: 'Whether WhatsApp shows a preview of the first URL in the text',
		displayOptions: { show: { ...send.show, messageType: ['text'] } },
	},
	{
		displayName: 'Template Name',
		name: 'templateName',
		type: 'string',
		required: true,
		default: '',
		placeholder: 'hello_world',
		displayOptions: { show: { ...send.show, messageType: ['template'] } },
	},
	{
		displayName: 'Language Code',
		name: 'languageCode',
		type: 'string',
		required: true,
		default: 'en_US',
		displayOptions: { show: { ...send.show, messageType: ['template'] } },
	},
	{
		displayName: 'Components',
		name: 'components',
		type: 'json',
		default: '[]',
		description:
			"The template's components (header, body, button parameters) as WhatsApp takes them",
		displayOptions: { show: { ...send.show, messageType: ['template'] } },
	},
	{
		displayName: 'Media Type',
		name: 'mediaType',
		type: 'options',
		options: [
			{ name: 'Audio', value: 'audio' },
			{ name: 'Document', value: 'document' },
			{ name: 'Image', value: 'image' },
			{ name: 'Sticker', value: 'sticker' },
			{ name: 'Video', value: 'video' },
		],
		default: 'image',
		displayOptions: { show: { ...send.show, messageType: ['media'] } },
	},
	{
		displayName: 'Media Link or ID',
		name: 'media',
		type: 'string',
		required: true,
		default: '',
		placeholder: 'https://example.com/photo.jpg',
		description: 'An https link to the file, or the ID of media uploaded to WhatsApp',
		displayOptions: { show: { ...send.show, messageType: ['media'] } },
	},
	{
		displayName: 'Caption',
		name: 'caption',
		type: 'string',
		default: '',
		displayOptions: {
			show: { ...send.show, messageType: ['media'], mediaType: ['document', 'image', 'video'] },
		},
	},
	{
		displayName: 'File Name',
		name: 'filename',
		type: 'string',
		default: '',
		displayOptions: { show: { ...send.show, messageType: ['media'], mediaType: ['document'] } },
	},
	{
		displayName: 'Interactive',
		name: 'interactive',
		type: 'json',
		required: true,
		default:
			'{\n  "type": "button",\n  "body": { "text": "Pick one" },\n  "action": { "buttons": [\n    { "type": "reply", "reply": { "id": "yes", "title": "Yes" } },\n    { "type": "reply", "reply": { "id": "no", "title": "No" } }\n  ] }\n}',
		description: 'The interactive object (button, list, cta_url, …) as WhatsApp takes it',
		displayOptions: { show: { ...send.show, messageType: ['interactive'] } },
	},
	{
		displayName: 'Options',
		name: 'options',
		type: 'collection',
		placeholder: 'Add option',
		default: {},
		displayOptions: send,
		options: [
			{
				displayName: 'Message ID',
				name: 'messageId',
				type: 'string',
				default: '',
				description:
					"The message's ID, accepted once per tenant for ever. Empty: a stable ID from the execution and the item, so n8n's retries are not sent twice.",
			},
			{
				displayName: 'To',
				name: 'to',
				type: 'string',
				default: '',
				description: 'The recipient, when it is not the conversation ID',
			},
		],
	},
	{
		displayName: 'Message ID',
		name: 'messageId',
		type: 'string',
		required: true,
		default: '={{ $json.message_id }}',
		description:
			'The message_id (for Post Replies: of the inbound message the Ordo Trigger received)',
		displayOptions: { show: { resource: ['message'], operation: ['get', 'postReplies'] } },
	},
	{
		displayName: 'Replies',
		name: 'replies',
		type: 'json',
		required: true,
		default: '[\n  { "type": "text", "text": { "body": "Hello" } }\n]',
		description:
			'The replies, sent in this order: an array of WhatsApp messages, or {"replies": [...]}; [] for none',
		displayOptions: { show: { resource: ['message'], operation: ['postReplies'] } },
	},
];

export const leaseFields: INodeProperties[] = [
	{
		displayName: 'Key',
		name: 'key',
		type: 'string',
		required: true,
		default: '',
		placeholder: 'order-1234',
		description: "The lease's key, per tenant",
		displayOptions: { show: { resource: ['lease'] } },
	},
	{
		displayName: 'TTL (Ms)',
		name: 'ttlMs',
		type: 'number',
		typeOptions: { minValue: 1 },
		default: 30000,
		description: 'How long the lease holds, in milliseconds',
		displayOptions: { show: { resource: ['lease'], operation: ['acquire', 'renew'] } },
	},
	{
		displayName: 'Token',
		name: 'token',
		type: 'number',
		required: true,
		default: 0,
		description: 'The fencing token Acquire returned',
		displayOptions: { show: { resource: ['lease'], operation: ['renew', 'release'] } },
	},
];
