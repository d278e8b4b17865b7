// A gRPC origin for bench/upstream-protocols.sh: helloworld.Greeter/SayHello, answering
// "Hello NAME". It uses no generated code: HelloRequest and HelloReply (one string field,
// number 1) have the wire form of google.protobuf.StringValue, which it decodes and
// encodes; ghz reads the service from the helloworld.proto the script writes.
//
// usage: grpc-origin ADDR   (e.g. 127.0.0.1:50051)
package main

import (
	"context"
	"log"
	"net"
	"os"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

type greeter interface{}

func sayHello(_ interface{}, _ context.Context, dec func(interface{}) error, _ grpc.UnaryServerInterceptor) (interface{}, error) {
	in := new(wrapperspb.StringValue)
	if err := dec(in); err != nil {
		return nil, err
	}
	return wrapperspb.String("Hello " + in.GetValue()), nil
}

func main() {
	if len(os.Args) != 2 {
		log.Fatal("usage: grpc-origin ADDR")
	}
	lis, err := net.Listen("tcp", os.Args[1])
	if err != nil {
		log.Fatal(err)
	}
	s := grpc.NewServer()
	s.RegisterService(&grpc.ServiceDesc{
		ServiceName: "helloworld.Greeter",
		HandlerType: (*greeter)(nil),
		Methods:     []grpc.MethodDesc{{MethodName: "SayHello", Handler: sayHello}},
	}, struct{}{})
	log.Fatal(s.Serve(lis))
}
